"""The input corpus: real text from what is installed on the machine, mixed with a fixed seed.

Four kinds, by share of characters:

* English prose (40 %): Python's own documentation topics, ``pydoc_data.topics``.
* Python source (30 %): modules of the standard library this interpreter ships.
* JSON (15 %): tool-result-like records generated with the seed from the names of the
  standard-library modules and sentences of the prose.
* CJK (15 %): Chinese, Japanese and Korean prose of CPython's own codec test data
  (``test/cjkencodings/*-utf8.txt``) and the zh_CN / ja / ko translations of a fixed list of
  GNU gettext catalogs under ``/usr/share/locale`` — real translated sentences.

Everything is deterministic for a given machine image; :func:`describe` reports sizes and a
digest so two runs can tell whether they counted the same text.
"""

from __future__ import annotations

import gettext
import hashlib
import json
import pydoc_data.topics
import random
import sysconfig
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

SHARES = {"prose": 0.40, "python": 0.30, "json": 0.15, "cjk": 0.15}
MESSAGE_CHARS = 400
GETTEXT_DOMAINS = (
    "coreutils",
    "libc",
    "bash",
    "apt",
    "dpkg",
    "grep",
    "sed",
    "tar",
    "findutils",
    "diffutils",
)
GETTEXT_LANGS = ("zh_CN", "ja", "ko")


def _prose() -> str:
    topics = pydoc_data.topics.topics
    return "\n\n".join(topics[k] for k in sorted(topics))


def _python_source(limit: int, rng: random.Random) -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if not p.name.startswith("_"))
    rng.shuffle(files)
    out: list[str] = []
    size = 0
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        out.append(text)
        size += len(text)
        if size >= limit:
            break
    return "\n".join(out)[:limit]


def _json_records(limit: int, rng: random.Random, prose: str) -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    names = sorted(p.stem for p in stdlib.glob("*.py"))
    sentences = [
        s.strip() for s in prose.replace("\n", " ").split(". ") if 20 < len(s.strip()) < 200
    ]
    out: list[str] = []
    size = 0
    i = 0
    while size < limit:
        record = {
            "id": i,
            "tool": rng.choice(["search", "read_file", "http_get", "sql_query", "calendar"]),
            "module": rng.choice(names),
            "score": round(rng.random(), 4),
            "ok": rng.random() > 0.1,
            "tags": rng.sample(names, k=rng.randint(1, 4)),
            "result": {
                "summary": rng.choice(sentences),
                "lines": [rng.randint(1, 5000) for _ in range(rng.randint(1, 6))],
                "elapsed_ms": round(rng.uniform(0.1, 900.0), 2),
            },
        }
        text = json.dumps(record, indent=2 if i % 3 == 0 else None, ensure_ascii=False)
        out.append(text)
        size += len(text) + 1
        i += 1
    return "\n".join(out)[:limit]


def _cjk_sources() -> list[tuple[str, str]]:
    """(source name, text) of every CJK source found, in a fixed order."""
    found: list[tuple[str, str]] = []
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    # Several encodings of one sample share the same UTF-8 text: keep each text once.
    seen: set[str] = set()
    for path in sorted((stdlib / "test" / "cjkencodings").glob("*-utf8.txt")):
        text = path.read_text(encoding="utf-8")
        if text not in seen:
            seen.add(text)
            found.append((f"cpython test/cjkencodings/{path.name}", text))
    # Domain by domain, each in every language, so that even the --quick corpus mixes Chinese,
    # Japanese and Korean (the scripts differ in how they stress a pre-tokenizer).
    for domain in GETTEXT_DOMAINS:
        for lang in GETTEXT_LANGS:
            path = Path("/usr/share/locale") / lang / "LC_MESSAGES" / f"{domain}.mo"
            if not path.exists():
                continue
            try:
                with path.open("rb") as fh:
                    catalog = gettext.GNUTranslations(fh)._catalog
            except (OSError, ValueError):
                continue
            texts = [
                v
                for k, v in sorted(catalog.items(), key=lambda kv: str(kv[0]))
                if k and isinstance(v, str)
            ]
            found.append((f"gettext {lang}/{domain}.mo", "\n".join(texts)))
    return found


def _cjk(limit: int) -> tuple[str, list[str]]:
    """Round-robin 2,000-character chunks of every source until ``limit``: each contributes."""
    sources = _cjk_sources()
    offsets = [0] * len(sources)
    out: list[str] = []
    used: set[str] = set()
    size = 0
    while size < limit and any(off < len(t) for off, (_, t) in zip(offsets, sources, strict=True)):
        for i, (name, text) in enumerate(sources):
            if offsets[i] >= len(text):
                continue
            chunk = text[offsets[i] : offsets[i] + 2000]
            offsets[i] += 2000
            out.append(chunk)
            used.add(name)
            size += len(chunk)
            if size >= limit:
                break
    return "".join(out)[:limit], [name for name, _ in sources if name in used]


def _split_messages(text: str, size: int) -> list[str]:
    """Pieces of about ``size`` characters, cut at whitespace where there is some nearby."""
    out = []
    i = 0
    n = len(text)
    while i < n:
        end = min(n, i + size)
        if end < n:
            cut = text.rfind(" ", i + size // 2, end)
            if cut == -1:
                cut = text.rfind("\n", i + size // 2, end)
            if cut != -1:
                end = cut + 1
        out.append(text[i:end])
        i = end
    return out


@dataclass
class Corpus:
    """The mixed corpus, its per-message split and the sizes to print."""

    text: str
    messages: list[str]
    parts: dict[str, int]
    sources: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # the kind of text of each message

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:16]

    def describe(self) -> str:
        parts = ", ".join(f"{k} {v:,} chars" for k, v in self.parts.items())
        return (
            f"{len(self.text):,} chars / {len(self.text.encode('utf-8')):,} UTF-8 bytes "
            f"({parts}); {len(self.messages):,} messages of ≈{MESSAGE_CHARS} chars; "
            f"sha256 {self.digest}"
        )


def corpus_size(quick: bool) -> int:
    """Characters of the corpus: 1,000,000 for the full run, 150,000 for --quick."""
    return 150_000 if quick else 1_000_000


@cache
def build(total_chars: int, seed: int) -> Corpus:
    """The mixed corpus of about ``total_chars`` characters for ``seed``."""
    rng = random.Random(seed)
    prose_all = _prose()
    limits = {k: int(total_chars * share) for k, share in SHARES.items()}
    start = rng.randrange(0, max(1, len(prose_all) - limits["prose"]))
    prose = prose_all[start : start + limits["prose"]]
    python = _python_source(limits["python"], rng)
    records = _json_records(limits["json"], rng, prose_all)
    cjk, sources = _cjk(limits["cjk"])
    parts = {"prose": prose, "python": python, "json": records, "cjk": cjk}
    tagged = [
        (kind, m) for kind, text in parts.items() for m in _split_messages(text, MESSAGE_CHARS)
    ]
    rng.shuffle(tagged)
    messages = [m for _, m in tagged]
    return Corpus(
        text="".join(messages),
        messages=messages,
        parts={k: len(v) for k, v in parts.items()},
        sources=sources,
        kinds=[kind for kind, _ in tagged],
    )


def worst_case(chars: int) -> str:
    """``chars`` characters without whitespace: the prose's letters only, lower-cased.

    That is a single pre-token for the o200k pattern, so the whole text goes through one
    byte-pair merge: the input that makes a quadratic merge show.
    """
    letters = "".join(c for c in _prose() if c.isascii() and c.isalpha()).lower()
    while len(letters) < chars:
        letters += letters
    return letters[:chars]


def pathological(kind: str, chars: int, seed: int) -> str:
    """``chars`` characters of one pre-token that is hard for a byte-pair merge.

    ``"repeated"``: one character repeated (every pair has the same rank, and each merge
    makes the next one's pair); ``"random"``: random lower-case ASCII letters (no word repeats,
    so nothing a cache of pieces could answer).
    """
    if kind == "repeated":
        return "a" * chars
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(chars))


def turn_pool(corpus: Corpus, count: int, seed: int, count_tokens: object) -> list[tuple[str, str]]:
    """``count`` (prompt, response) pairs of ≈60 and ≈200 tokens cut from the corpus.

    ``count_tokens(text) -> int`` is the exact reference counter used to size the cuts.
    """
    rng = random.Random(seed + 1)
    text = corpus.text
    counter = count_tokens  # callable

    def cut(tokens: int) -> str:
        start = rng.randrange(0, len(text) - tokens * 8)
        space = text.find(" ", start, start + 40)
        if space != -1:
            start = space + 1
        length = tokens * 4
        for _ in range(6):
            piece = text[start : start + length]
            n = counter(piece)  # type: ignore[operator]
            if abs(n - tokens) <= tokens * 0.05 or n == 0:
                break
            length = max(1, int(length * tokens / n))
        return text[start : start + length]

    return [(cut(60), cut(200)) for _ in range(count)]
