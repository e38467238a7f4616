"""Token counting: exact counts equal on both paths and against OpenAI's tiktoken."""

from __future__ import annotations

import inspect
import json
import logging
import os
import pickle
import random
import re
import select
import signal
import string
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import tiktoken
from hypothesis import given
from hypothesis import strategies as st

import memlane
from conftest import require_rust_core
from memlane import _backend
from memlane._pure import tokens as pure_tokens
from memlane._pure.tokens import _PATTERNS, ENCODING_NAMES, load_ranks
from memlane.tokens import PyTokenEstimator, TokenEstimator

ORACLES = {
    name: tiktoken.Encoding(
        f"memlane-test-{name}",
        pat_str=_PATTERNS[name],
        mergeable_ranks=load_ranks(name),
        special_tokens={},
    )
    for name in ENCODING_NAMES
}


def make(backend: str, **kwargs: Any) -> Any:
    """The public estimator, counting with implementation ``backend``."""
    if backend == "rust":
        require_rust_core()
        with _backend.use("rust"):
            return TokenEstimator(**kwargs)
    return PyTokenEstimator(**kwargs)


def engine(estimator: TokenEstimator) -> type:
    """The class of the encoder an estimator counts with."""
    return type(estimator._count.__self__)  # type: ignore[attr-defined]  # a bound method


# Text that exercises every branch of the pre-tokenizer patterns.
code_text = st.sampled_from(
    [
        "def f(x):\n    return x ** 2  # square\n",
        "for (int i = 0; i < n; ++i) { a[i] = b[i]; }",
        '{"key": [1, 2.5e-3, null, true], "nested": {"a": "b"}}',
        "SELECT * FROM t WHERE name = 'O''Brien';",
    ]
)
unicode_text = st.text(alphabet=st.characters(codec=None, exclude_categories=["Cs"]), max_size=300)
cjk_emoji = st.lists(
    st.sampled_from(
        [*"日本語中文한국어テキスト漢字", "🎉", "👍🏽", "👨‍👩‍👧", "🇫🇷", "e\u0301", "\u0308", "ﷺ"]
    ),
    max_size=100,
).map("".join)
whitespace_runs = st.text(
    alphabet=st.sampled_from([" ", "\t", "\n", "\r", "\u00a0", "\u3000", "\x1c", "x"]), max_size=80
)
long_words = st.builds(
    lambda c, n: c * n,
    st.sampled_from(["a", "Z", "!", "9", "é", "字", "ab"]),
    st.integers(50, 3000),
)
contractions = st.lists(
    st.sampled_from(["I'm", "you'RE", "it'S", "don't", "'ll", "'Ve", "x'd", "'"]), max_size=20
).map(" ".join)
json_text = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
).map(json.dumps)

# Whitespace next to letters, digits and punctuation is where the look-ahead `\s+(?!\S)` of
# the original patterns decides piece boundaries; the Rust splitter re-creates it by hand.
spacing = st.lists(
    st.sampled_from(
        [
            " ",
            "  ",
            "\t",
            "\n",
            "\r\n",
            " \n ",
            "\u00a0",
            "\u2003",
            "\u3000",
            "\x0b",
            "\x0c",
            "\x85",
            "a",
            "Bc",
            "7",
            "123456",
            "!",
            "/",
            "'s",
            "'ſ",
            "'K",
            "é",
            "字",
            "\u0301",
            "😀",
            "_",
        ]
    ),
    max_size=40,
).map("".join)
# One long piece without whitespace (the worst case's shape, any letters), and a few
# non-token words repeated many times (the counter remembers merged pieces: a repeat must
# count what the first occurrence counted).
letter_runs = st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyzé"), min_size=100)
repeated_words = st.builds(
    lambda words, n: " ".join(words * n),
    st.lists(st.text(alphabet="qxzjkvé", min_size=3, max_size=12), min_size=1, max_size=5),
    st.integers(2, 40),
)
any_text = st.one_of(
    letter_runs,
    repeated_words,
    unicode_text,
    cjk_emoji,
    whitespace_runs,
    long_words,
    contractions,
    json_text,
    code_text,
    spacing,
)
mixed_text = st.lists(any_text, max_size=5).map("".join)


class TestExactCountsAgree:
    """The Rust counter, the Python twin and tiktoken give identical counts for any text."""

    @pytest.mark.parametrize("encoding_name", ENCODING_NAMES)
    @given(text=mixed_text)
    def test_rust_python_and_tiktoken_agree(self, encoding_name: str, text: str) -> None:
        rust = make("rust", encoding_name=encoding_name)
        py = make("python", encoding_name=encoding_name)
        expected = len(ORACLES[encoding_name].encode_ordinary(text))
        assert rust.estimate(text) == py.estimate(text) == expected

    @given(texts=st.lists(mixed_text, max_size=20))
    def test_estimate_many_equals_mapped_estimate(self, texts: list[str]) -> None:
        for backend in ("rust", "python"):
            est = make(backend)
            assert est.estimate_many(texts) == [est.estimate(t) for t in texts]
        assert make("rust").estimate_many(texts) == make("python").estimate_many(texts)

    @given(text=st.text(max_size=50))
    def test_lone_surrogates_are_counted_like_tiktoken(self, text: str) -> None:
        salted = "\ud800" + text + "\udfff" + "\ud83d\ude00"
        expected = len(ORACLES["o200k_base"].encode_ordinary(salted))
        assert make("rust").estimate(salted) == make("python").estimate(salted) == expected

    def test_large_batch_runs_in_parallel_and_in_order(self) -> None:
        texts = [f"message {i}: " + "lorem ipsum dolor " * (i % 40) for i in range(3000)]
        rust, py = make("rust"), make("python")
        assert rust.estimate_many(texts) == py.estimate_many(texts)

    def test_large_batches_from_many_threads_and_a_forked_child(self) -> None:
        """The Rust batch workers outlive a call: batches racing from several threads, and a
        child forked after the workers started (which has none of them), count the same."""
        texts = [f"message {i}: " + "lorem ipsum 漢字 " * (i % 40) for i in range(3000)]
        rust = make("rust")
        expected = make("python").estimate_many(texts)
        assert rust.estimate_many(texts) == expected  # the workers start
        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(lambda _: rust.estimate_many(texts), range(8))) == [expected] * 8
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: count, report, leave without running the parent's cleanup
            try:
                ok = rust.estimate_many(texts) == expected
                os.write(write, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(write)
        try:
            with os.fdopen(read, "rb") as answer:
                ready, _, _ = select.select([answer], [], [], 60)
                assert ready, "the forked child did not finish counting within 60 s"
                assert answer.read() == b"1"
        finally:
            if os.waitpid(pid, os.WNOHANG)[0] == 0:  # still running: it hung
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)

    @pytest.mark.parametrize("encoding_name", ENCODING_NAMES)
    def test_repeated_pieces_count_the_same_after_the_cache_forgets(
        self, encoding_name: str
    ) -> None:
        # 20,000 distinct non-token words, twice: more than the Rust counter's per-thread
        # cache of merged pieces holds, so the second pass counts after it was cleared.
        def word(i: int) -> str:
            letters = "".join("qxzjkvwy"[(i >> shift) & 7] for shift in range(0, 15, 3))
            return f"zq{letters}jx"

        words = [word(i) for i in range(20_000)]
        text = " ".join(words * 2)
        expected = len(ORACLES[encoding_name].encode_ordinary(text))
        for backend in ("rust", "python"):
            est = make(backend, encoding_name=encoding_name)
            assert est.estimate(text) == expected
            assert est.estimate_many(words[:5000]) == [
                len(ORACLES[encoding_name].encode_ordinary(w)) for w in words[:5000]
            ]

    @pytest.mark.parametrize(
        ("text", "expected"),
        [("", 0), ("hello world", 2), ("<|endoftext|>", 7), ("a" * 5000, 625)],
    )
    def test_known_counts(self, backend: str, text: str, expected: int) -> None:
        assert make(backend).estimate(text) == expected


class TestHeuristicMode:
    """Heuristic mode counts whitespace words times tokens_per_word, at least 1 if non-empty."""

    @given(text=st.one_of(unicode_text, whitespace_runs, mixed_text), tpw=st.floats(0.01, 10))
    def test_both_paths_follow_python_split(self, text: str, tpw: float) -> None:
        expected = 0 if not text else max(1, int(len(text.split()) * tpw))
        for backend in ("rust", "python"):
            assert make(backend, mode="heuristic", tokens_per_word=tpw).estimate(text) == expected

    def test_defaults(self, backend: str) -> None:
        est = make(backend, mode="heuristic")
        assert est.estimate("one two three four") == 5  # int(4 * 1.33)
        assert est.estimate("   ") == 1
        assert est.estimate("") == 0


class TestApi:
    """Constructor defaults, fits, repr and pickling behave the same on both paths."""

    def test_defaults(self, backend: str) -> None:
        est = make(backend)
        assert (est.encoding_name, est.tokens_per_word, est.mode) == ("o200k_base", 1.33, "exact")
        assert (
            repr(est)
            == "TokenEstimator(encoding_name='o200k_base', tokens_per_word=1.33, mode='exact')"
        )

    def test_fits(self, backend: str) -> None:
        est = make(backend)
        assert est.fits("hello world", 2)
        assert not est.fits("hello world", 1)
        assert est.fits("", 0)
        assert not est.fits("x", -1)

    def test_pickle_round_trip(self, backend: str) -> None:
        est = make(backend, encoding_name="cl100k_base", mode="heuristic", tokens_per_word=2.0)
        clone = pickle.loads(pickle.dumps(est))  # noqa: S301 - the test's own pickle
        assert repr(clone) == repr(est)

    @pytest.mark.parametrize(("writer", "reader"), [("rust", "python"), ("python", "rust")])
    def test_pickle_crosses_implementations(self, writer: str, reader: str) -> None:
        require_rust_core()
        data = pickle.dumps(make(writer, encoding_name="cl100k_base"))
        with _backend.use(reader) as chosen:  # type: ignore[arg-type]  # a BackendName
            clone = pickle.loads(data)  # noqa: S301 - the test's own pickle
        assert type(clone) is TokenEstimator
        assert engine(clone) is chosen.Encoder
        assert clone.encoding_name == "cl100k_base"
        assert clone.estimate("hello world") == 2

    def test_one_public_class_counting_with_the_active_engine(self) -> None:
        assert memlane.TokenEstimator is TokenEstimator
        assert TokenEstimator.__module__ == "memlane.tokens"
        assert engine(TokenEstimator()) is _backend.active.Encoder
        assert engine(PyTokenEstimator()) is pure_tokens.Encoder

    def test_real_signature_and_docstring(self) -> None:
        params = inspect.signature(TokenEstimator).parameters
        assert [(p.name, p.kind, p.default) for p in params.values()] == [
            ("encoding_name", inspect.Parameter.KEYWORD_ONLY, "o200k_base"),
            ("tokens_per_word", inspect.Parameter.KEYWORD_ONLY, 1.33),
            ("mode", inspect.Parameter.KEYWORD_ONLY, "exact"),
        ]
        assert TokenEstimator.__doc__ is not None
        assert "Args:" in TokenEstimator.__doc__


class TestBadInput:
    """Bad input raises the same precise exception on both paths."""

    @pytest.mark.parametrize("bad", [None, 3, b"bytes", ["a"]])
    def test_non_str_text(self, backend: str, bad: object) -> None:
        with pytest.raises(TypeError, match=f"^text must be str, not {type(bad).__name__}$"):
            make(backend).estimate(bad)

    def test_estimate_many_names_the_bad_item(self, backend: str) -> None:
        with pytest.raises(TypeError, match=r"^texts\[2\] must be str, not int$"):
            make(backend).estimate_many(["a", "b", 3])
        with pytest.raises(TypeError, match=r"^texts must be an iterable of str, not str$"):
            make(backend).estimate_many("abc")
        with pytest.raises(TypeError, match=r"^texts must be an iterable of str, not int$"):
            make(backend).estimate_many(5)

    @pytest.mark.parametrize("name", ["gpt2", "", "O200K_BASE", 5])
    def test_unknown_encoding_lists_valid_ones(self, backend: str, name: object) -> None:
        message = f"unknown encoding_name {name!r}; valid: 'cl100k_base', 'o200k_base'"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            make(backend, encoding_name=name)

    @pytest.mark.parametrize("mode", ["fast", None, 1])
    def test_unknown_mode_lists_valid_ones(self, backend: str, mode: object) -> None:
        message = f"unknown mode {mode!r}; valid: 'exact', 'heuristic'"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            make(backend, mode=mode)

    @pytest.mark.parametrize("tpw", [0, -1.0, float("nan"), float("inf"), True, "1.3", 10**400])
    def test_bad_tokens_per_word(self, backend: str, tpw: object) -> None:
        message = f"tokens_per_word must be a finite number > 0, got {tpw!r}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            make(backend, tokens_per_word=tpw)

    def test_fits_rejects_non_int_limit(self, backend: str) -> None:
        with pytest.raises(TypeError, match=r"^max_tokens must be int, not float$"):
            make(backend).fits("x", 1.5)

    def test_positional_arguments_are_rejected(self, backend: str) -> None:
        with pytest.raises(TypeError):
            make(backend).__class__("o200k_base")


class TestPathologicalInput:
    """A megabyte without whitespace is counted exactly, and the long-piece merge is O(n log n)."""

    @pytest.mark.slow
    @pytest.mark.parametrize(
        "text",
        ["a" * (1 << 20), "!" * (1 << 20), "x7" * (1 << 19)],
        ids=["letters", "punct", "mixed"],
    )
    def test_one_megabyte(self, backend: str, text: str) -> None:
        assert make(backend).estimate(text) == make("rust").estimate(text)

    @pytest.mark.parametrize("kind", ["repeated", "random letters", "words without spaces"])
    def test_long_pieces_count_as_tiktoken_does(self, backend: str, kind: str) -> None:
        # The benchmarks' worst cases, smaller: each one pre-token merged in tiktoken's order.
        rng = random.Random(28)
        text = {
            "repeated": "a" * 20_000,
            "random letters": "".join(rng.choice(string.ascii_lowercase) for _ in range(20_000)),
            "words without spaces": "thequickbrownfoxjumpsoverthelazydog" * 600,
        }[kind]
        expected = len(ORACLES["o200k_base"].encode_ordinary(text))
        assert make(backend).estimate(text) == expected
        assert make(backend).estimate(text) == expected  # again, from warm per-thread tables

    @given(
        text=st.text(alphabet=st.sampled_from(string.ascii_lowercase), min_size=500, max_size=4000)
        | st.text(alphabet=st.sampled_from("abé字😀!"), min_size=500, max_size=2000)
    )
    def test_generated_long_pieces(self, text: str) -> None:
        # Random letters (each one long pre-token with nothing periodic to shortcut) and long
        # runs mixing letters, CJK, emoji and punctuation: the general merge on both paths.
        expected = len(ORACLES["o200k_base"].encode_ordinary(text))
        assert make("rust").estimate(text) == make("python").estimate(text) == expected

    @pytest.mark.parametrize("piece", [b"a" * (1 << 14), b"!" * (1 << 14), b"ab" * (1 << 13)])
    def test_long_piece_merge_does_linearly_many_lookups(self, piece: bytes) -> None:
        # Every merge removes one part and looks up at most two new pairs, so lookups stay
        # below 3n; the O(n^2) rescan it replaced made about n^2 / 2 (no timing: a loaded
        # machine makes wall-clock bounds flaky).
        lookups = 0

        class CountingRanks(dict[bytes, int]):
            def get(self, key: bytes, default: Any = None) -> Any:
                nonlocal lookups
                lookups += 1
                return super().get(key, default)

        ranks = CountingRanks(pure_tokens.get_bpe("o200k_base").ranks)
        count = pure_tokens._merge_large(ranks, piece)
        assert count == len(ORACLES["o200k_base"].encode_ordinary(piece.decode()))
        assert lookups < 3 * len(piece)


class TestBackendSelection:
    """The extension is used when importable; the twin otherwise, with one debug line."""

    def run(self, code: str, **env: str) -> str:
        import os

        full_env = {**os.environ, **env}
        full_env.pop("MEMLANE_PURE_PYTHON", None) if "MEMLANE_PURE_PYTHON" not in env else None
        out = subprocess.run(
            [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, check=True
        )
        return out.stdout.strip()

    def test_forced_pure_python(self) -> None:
        assert (
            self.run("import memlane; print(memlane.BACKEND)", MEMLANE_PURE_PYTHON="1") == "python"
        )

    def test_rust_by_default(self) -> None:
        require_rust_core()
        assert self.run("import memlane; print(memlane.BACKEND)") == "rust"

    def test_broken_extension_falls_back_with_debug_line(self) -> None:
        code = (
            "import logging, sys; logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format='%(message)s');"
            "sys.modules['memlane._core'] = None;"
            "import memlane; print(memlane.BACKEND); print(memlane.TokenEstimator().estimate('hi there'))"
        )
        lines = self.run(code).splitlines()
        assert lines[-2:] == ["python", "2"]
        assert sum("pure-Python backend" in line for line in lines) == 1

    def test_debug_line_is_silent_by_default(self, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.WARNING, logger="memlane"):
            assert self.run("import memlane", MEMLANE_PURE_PYTHON="1") == ""


class TestConstructorKeywords:
    """Only the documented keywords are accepted, and only by keyword."""

    def test_unknown_keyword(self, backend: str) -> None:
        with pytest.raises(TypeError, match="unexpected keyword argument 'encoding'"):
            make(backend, encoding="o200k_base")
