"""Periodic pieces (one character or a short pattern repeated) count as tiktoken counts them.

Both paths merge such a piece on one period (``memlane._pure.periodic`` and its Rust twin
``rust/src/tokens/periodic.rs``); these tests hold the result to OpenAI's tiktoken and to the
general merge, on every kind of character, generated patterns, and a vocabulary built so that
every step of the shortcut (and its giving up) is taken.
"""

from __future__ import annotations

import functools
import itertools
import random

import pytest
import tiktoken
from hypothesis import given
from hypothesis import strategies as st

from memlane._pure import periodic
from memlane._pure import tokens as pure_tokens
from memlane._pure.tokens import load_ranks
from test_tokens import ORACLES, make

# One character of every kind: ASCII letters, digits, punctuation, spaces and controls; two-,
# three- and four-byte UTF-8 (CJK, kana, Hangul, emoji, a skin tone, a combining mark, the last
# code point, a byte-order mark); characters whose UTF-8 looks like invalid sequences (U+0080 is
# `c2 80`, U+2000 `e2 80 80` with a repeated continuation byte, U+FFFD the replacement
# character itself); and a lone surrogate, which is counted as tiktoken counts it (as U+FFFD).
CHARACTERS = [
    "a",
    "Z",
    "!",
    "9",
    " ",
    "\n",
    "\x00",
    "\x7f",
    "é",
    "ß",
    "Ω",
    "\u0301",
    "\u0080",
    "中",
    "字",
    "ア",
    "한",
    "\u2000",
    "\ufffd",
    "\ufeff",
    "😀",
    "\U0001f3fd",
    "𝒜",
    "\U0010ffff",
    "\ud800",
]
PATTERNS = ["ab", "x7", "=-", "e\u0301", "👍🏽", "🇫🇷", "abc", "a b"]


def tiktoken_count(text: str, encoding_name: str = "o200k_base") -> int:
    return len(ORACLES[encoding_name].encode_ordinary(text))


@functools.cache
def one_piece(encoding_name: str) -> tiktoken.Encoding:
    """tiktoken's merge alone: the encoding's ranks with a pattern that never splits."""
    return tiktoken.Encoding(
        f"memlane-one-piece-{encoding_name}",
        pat_str=r"[\s\S]+",
        mergeable_ranks=load_ranks(encoding_name),
        special_tokens={},
    )


class TestRepeatedCharacters:
    """One character repeated counts as tiktoken counts it, at every length, on both paths."""

    @pytest.mark.parametrize("encoding_name", ["o200k_base", "cl100k_base"])
    @pytest.mark.parametrize("character", CHARACTERS, ids=[f"U+{ord(c):04X}" for c in CHARACTERS])
    def test_every_kind_of_character(
        self, backend: str, encoding_name: str, character: str
    ) -> None:
        estimator = make(backend, encoding_name=encoding_name)
        for copies in (1, 7, 33, 64, 127, 128, 129, 1000, 4097, 20_000):
            text = character * copies
            assert estimator.estimate(text) == tiktoken_count(text, encoding_name), copies

    @pytest.mark.parametrize("pattern", PATTERNS)
    def test_short_patterns_with_any_tail(self, backend: str, pattern: str) -> None:
        estimator = make(backend)
        for copies, tail in itertools.product((9, 100, 3001), range(len(pattern))):
            text = pattern * copies + pattern[:tail]
            assert estimator.estimate(text) == tiktoken_count(text), (copies, tail)

    @pytest.mark.parametrize("text", ["a" * 200_000, "😀" * 50_000], ids=["letter", "emoji"])
    def test_the_benchmark_size(self, backend: str, text: str) -> None:
        assert make(backend).estimate(text) == tiktoken_count(text)

    @given(
        unit=st.text(
            alphabet=st.characters(codec=None, exclude_categories=["Cs"]), min_size=1, max_size=4
        ),
        copies=st.integers(1, 3000),
        tail=st.integers(0, 3),
    )
    def test_generated_patterns(self, unit: str, copies: int, tail: int) -> None:
        text = unit * copies + unit[:tail]
        expected = tiktoken_count(text)
        assert make("rust").estimate(text) == expected
        assert make("python").estimate(text) == expected


class TestPythonShortcut:
    """The twin's shortcut answers for repeated characters, and answers what the merge does."""

    @pytest.mark.parametrize("encoding_name", ["o200k_base", "cl100k_base"])
    def test_answers_for_every_character_as_tiktoken(self, encoding_name: str) -> None:
        ranks = pure_tokens.get_bpe(encoding_name).ranks
        for character in [*CHARACTERS[:-1], *PATTERNS]:
            for copies in (8, 129, 5000):
                text = character * copies
                answer = periodic.count(ranks, text.encode())
                expected = len(one_piece(encoding_name).encode_ordinary(text))
                assert answer == expected, (character, copies)

    def test_declines_pieces_that_are_not_periodic(self) -> None:
        ranks = pure_tokens.get_bpe("o200k_base").ranks
        for piece in [b"abcdefghi" * 20, b"a" * 300 + b"b", b"ab" * 7]:
            assert periodic.count(ranks, piece) is None

    def test_out_of_rank_order_vocabulary(self) -> None:
        # Every string of up to four of `abcd`, ranked at random: merges often make pairs
        # below the rank being merged and scans reach into the next copy, so the shortcut
        # takes every step and also gives up. Whatever it answers is the general merge's.
        rng = random.Random(28)
        multi = [
            "".join(word).encode()
            for size in range(2, 5)
            for word in itertools.product("abcd", repeat=size)
        ]
        rng.shuffle(multi)
        ranks = {bytes([b]): b for b in range(256)}
        ranks.update({token: 256 + i for i, token in enumerate(multi)})
        answered = declined = 0
        for round_ in range(1500):
            unit = "".join(rng.choice("abcd") for _ in range(rng.randint(1, 6)))
            copies = rng.randrange(2000 if round_ % 10 == 0 else 100)
            piece = (unit * copies + unit[: rng.randrange(6)]).encode()
            answer = periodic.count(ranks, piece)
            if answer is None:
                declined += 1
                continue
            answered += 1
            assert answer == pure_tokens._merge_large(ranks, piece), piece
            if len(piece) < 200:
                assert answer == pure_tokens._merge_small(ranks, piece), piece
        assert answered > 200
        assert declined > 20
