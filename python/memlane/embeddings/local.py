"""The local embedding model: WordLlama's ``l2_supercat`` weights from the installed wheel.

WordLlama (``pip install memlane[embed]``) ships a 16 MB static embedding table
(``wordllama/weights/l2_supercat_256.safetensors``, 32,000 tokens x 256 float16) and the
tokenizer it was trained with (``wordllama/tokenizers/l2_supercat_tokenizer_config.json``).
A text's embedding is the mean of its tokens' rows, made unit length: no network, no GPU,
microseconds per short text.

WordLlama's own loader is not used: it looks for the tokenizer under ``tokenizer/`` while the
wheel ships ``tokenizers/``, then downloads from Hugging Face, and importing the package calls
``logging.basicConfig`` for the whole process. This module finds the wheel's directory without
importing it (``importlib.util.find_spec``) and reads the two files with ``safetensors`` and
``tokenizers``, WordLlama's own dependencies, so nothing can reach the network. The table is
read once per process, on the first embedding, and shared by every model object.
"""

from __future__ import annotations

import importlib.util
import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_ai.embeddings import EmbeddingModel, EmbeddingResult, EmbeddingSettings
from pydantic_ai.embeddings.result import EmbedInputType
from pydantic_ai.usage import RequestUsage

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "LOCAL_DIMENSIONS",
    "LOCAL_MODEL_NAME",
    "LOCAL_SYSTEM",
    "LocalEmbeddingModel",
    "local_embedding_model",
]

LOCAL_SYSTEM = "wordllama"
"""The model's ``system``: the first half of its id, ``wordllama:l2_supercat``."""

LOCAL_MODEL_NAME = "l2_supercat"
"""The model's ``model_name``."""

LOCAL_DIMENSIONS = 256
"""Dimensions of every vector it makes."""

_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
_TENSOR = "embedding.weight"
_MISSING = (
    "the local embedding model needs WordLlama's bundled weights: pip install 'memlane[embed]'"
)

# Texts per call of the tokenizer, and padded tokens per group of texts summed together: texts
# are grouped shortest first, so one long text does not pad many short ones to its length.
_CHUNK = 4096
_CELLS = 65_536


_SPACE = "\u2581"
"""What the tokenizer's normalizer makes of a space, and puts before every text."""

_PIECES = re.compile(f"{_SPACE}+[^{_SPACE}]*")
"""A normalised text's pieces: a run of spaces and the word after it."""

_ADDED = "<"
"""What every added token (``<unk>``, ``<s>``, ``</s>``) starts with: the tokenizer finds
those in the raw text before normalising, so a text holding one is tokenised whole."""

_PIECES_KEPT = 32_768
"""Pieces whose token ids are kept (about 5 MB): the first ones seen, never evicted, so a
reader never finds one gone; a piece past them is tokenised again each time."""


@dataclass(frozen=True)
class _Table:
    tokenizer: Any  # tokenizers.Tokenizer: untyped
    rows: npt.NDArray[np.float32]
    # encode_batch_fast (tokenizers >= 0.20) skips the character offsets pooling never
    # reads: 40% less time per batch.
    encode: Any
    # Token ids by piece (see _token_ids), or None when the tokenizer cannot be split so.
    pieces: dict[str, tuple[int, ...]] | None


_table: _Table | None = None
_table_guard = threading.Lock()


def _wheel_dir() -> Path:
    """The installed ``wordllama`` package's directory, found without importing it.

    Raises:
        ImportError: WordLlama (or numpy, safetensors, tokenizers) is not installed; the
            message names ``memlane[embed]``.
    """
    for needed in ("numpy", "safetensors", "tokenizers"):
        if importlib.util.find_spec(needed) is None:
            raise ImportError(f"{_MISSING} ({needed} is missing)")
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{_MISSING} (wordllama is missing)")
    base = Path(next(iter(spec.submodule_search_locations)))
    for parts in (_WEIGHTS, _TOKENIZER):
        if not base.joinpath(*parts).is_file():
            raise ImportError(f"{_MISSING} ({base.joinpath(*parts)} is missing)")
    return base


def _load() -> _Table:
    """The tokenizer and the float32 table, read from the wheel once per process."""
    global _table  # one table per process: 32 MB as float32, shared by every model object
    with _table_guard:
        if _table is None:
            import numpy as np
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer

            base = _wheel_dir()
            weights = load_file(str(base.joinpath(*_WEIGHTS)))[_TENSOR]
            tokenizer = Tokenizer.from_file(str(base.joinpath(*_TOKENIZER)))
            # One zero row past the vocabulary: what padding gathers, adding nothing to a sum.
            rows = np.zeros((weights.shape[0] + 1, weights.shape[1]), dtype=np.float32)
            rows[:-1] = weights
            encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
            pieces: dict[str, tuple[int, ...]] | None = None
            if _splits_at_spaces(tokenizer):
                lone = tuple(token.id for token in tokenizer.model.tokenize(_SPACE))
                pieces = {_SPACE: lone}
            _table = _Table(tokenizer, rows, encode, pieces)
        return _table


def _splits_at_spaces(tokenizer: Any) -> bool:
    """Whether a text's token ids are its pieces' ids end to end (what :func:`_token_ids`
    relies on), read from the tokenizer's own definition.

    The wheel's tokenizer (Llama's) has no pre-tokenizer: BPE runs over the whole normalised
    text, ``"\u2581" + text.replace(" ", "\u2581")``, and costs ~20 us a fact. No token of its
    vocabulary holds ``\u2581`` after another character, so no merge joins a word to the
    spaces after it, and BPE over the whole text is BPE over each piece (a run of
    ``\u2581`` and the word after it) in turn; a test holds the two equal on generated text.
    """
    spec = json.loads(tokenizer.to_str())
    normalizers = (spec.get("normalizer") or {}).get("normalizers") or []
    expected = [
        {"type": "Prepend", "prepend": _SPACE},
        {"type": "Replace", "pattern": {"String": " "}, "content": _SPACE},
    ]
    model = spec.get("model") or {}
    return (
        normalizers == expected
        and spec.get("pre_tokenizer") is None
        and model.get("type") == "BPE"
        and all(t.get("content", "").startswith(_ADDED) for t in spec.get("added_tokens", []))
        and not any(_SPACE in token.lstrip(_SPACE) for token in model.get("vocab", {}))
    )


def _token_ids(table: _Table, texts: list[str]) -> list[list[int]]:
    """Each text's token ids, as ``table.encode`` gives them.

    With a tokenizer that splits at spaces (see :func:`_splits_at_spaces`), a text is cut
    into pieces and each piece's ids are looked up; only pieces not seen before are
    tokenised, in one batch. Words repeat across facts, so most pieces are known.
    """
    known = table.pieces
    if known is None:
        return [e.ids for e in table.encode(texts, add_special_tokens=False)]
    split: list[list[str] | None] = []
    new: dict[str, tuple[int, ...]] = {}
    for text in texts:
        if _ADDED in text:
            split.append(None)
            continue
        pieces = _PIECES.findall(_SPACE + text.replace(" ", _SPACE)) if text else []
        split.append(pieces)
        for piece in pieces:
            if piece not in known:
                new[piece] = ()
    if new:
        # A piece's raw form (without its first space, which the normaliser puts back) is
        # tokenised alone; the lone space, whose raw form is empty, was looked up at load.
        fresh = list(new)
        for piece, encoded in zip(
            fresh, table.encode([p[1:] for p in fresh], add_special_tokens=False), strict=True
        ):
            made = new[piece] = tuple(encoded.ids)
            if len(known) < _PIECES_KEPT:
                known[piece] = made
    whole = [text for text, pieces in zip(texts, split, strict=True) if pieces is None]
    whole_ids = iter(table.encode(whole, add_special_tokens=False) if whole else ())
    out: list[list[int]] = []
    get = known.get
    for text_pieces in split:
        if text_pieces is None:
            out.append(next(whole_ids).ids)
            continue
        ids: list[int] = []
        for piece in text_pieces:
            found = get(piece)
            ids += new[piece] if found is None else found
        out.append(ids)
    return out


class LocalEmbeddingModel(EmbeddingModel):
    """WordLlama ``l2_supercat`` (256 dimensions) as a pydantic-ai ``EmbeddingModel``, offline.

    Queries and documents are embedded alike (the model is symmetric). Vectors are unit
    length; a text without a single token (``""``) gets the zero vector, which has no
    direction and is never stored.

    Use :func:`local_embedding_model` to make one.
    """

    def __init__(self, *, settings: EmbeddingSettings | None = None) -> None:
        _wheel_dir()  # fail at construction, naming the extra, not at the first embedding
        super().__init__(settings=settings)

    @property
    def model_name(self) -> str:
        """``l2_supercat``."""
        return LOCAL_MODEL_NAME

    @property
    def system(self) -> str:
        """``wordllama``."""
        return LOCAL_SYSTEM

    async def embed(
        self,
        inputs: str | Sequence[str],
        *,
        input_type: EmbedInputType,
        settings: EmbeddingSettings | None = None,
    ) -> EmbeddingResult:
        """The texts' vectors (microseconds each, so it runs inline rather than in a thread).

        Args:
            inputs: One text or several.
            input_type: ``query`` or ``document``; the model treats both alike.
            settings: Accepted for the interface; nothing in them applies to a static model.
        """
        texts, _ = self.prepare_embed(inputs, settings)
        vectors = self.encode(texts)
        return EmbeddingResult(
            embeddings=vectors.tolist(),
            inputs=texts,
            input_type=input_type,
            usage=RequestUsage(),
            model_name=self.model_name,
            provider_name=self.system,
        )

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The unit vectors of ``texts``, one row each, synchronously.

        Each text's vector is the mean of its tokens' rows (WordLlama's average pooling),
        scaled to length 1 (so the mean's divisor drops out); a text without tokens gets
        zeros.
        """
        import numpy as np

        table = _load()
        out = np.zeros((len(texts), table.rows.shape[1]), dtype=np.float32)
        for start in range(0, len(texts), _CHUNK):
            ids = _token_ids(table, list(texts[start : start + _CHUNK]))
            for group in _groups([len(i) for i in ids]):
                sums = _sums(table, [ids[i] for i in group])
                norms = np.linalg.norm(sums, axis=1, keepdims=True)
                out[start + np.asarray(group)] = sums / np.where(norms > 0, norms, 1.0)
        return out

    async def max_input_tokens(self) -> int | None:
        """``None``: a static model takes texts of any length."""
        return None

    async def count_tokens(self, text: str) -> int:
        """How many of the tokenizer's tokens ``text`` holds."""
        return len(_load().tokenizer.encode(text, add_special_tokens=False).ids)


def _groups(lengths: list[int]) -> list[list[int]]:
    """Indices of texts with tokens, shortest first, in groups whose padded token matrix
    (texts x longest) stays within :data:`_CELLS`: one long text never makes a thousand
    short ones sum its length in padding."""
    order = sorted((i for i, n in enumerate(lengths) if n), key=lengths.__getitem__)
    groups: list[list[int]] = []
    group: list[int] = []
    for i in order:
        if group and (len(group) + 1) * lengths[i] > _CELLS:
            groups.append(group)
            group = []
        group.append(i)
    if group:
        groups.append(group)
    return groups


def _sums(table: _Table, ids: list[list[int]]) -> npt.NDArray[np.float32]:
    """Each token list's sum of rows, one token position at a time: a (texts x 256) gather
    per position added in place, where one gather of the whole padded (texts x tokens x 256)
    block took 2.5 times as long. Padding points at the zero row past the vocabulary."""
    import numpy as np

    vocabulary = table.rows.shape[0] - 1
    width = max(len(i) for i in ids)
    padded = np.full((len(ids), width), vocabulary, dtype=np.int64)
    for row, tokens in enumerate(ids):
        padded[row, : len(tokens)] = tokens
    np.clip(padded, 0, vocabulary, out=padded)
    summed = np.zeros((len(ids), table.rows.shape[1]), dtype=np.float32)
    for position in range(width):
        summed += table.rows[padded[:, position]]
    return summed


def local_embedding_model() -> LocalEmbeddingModel:
    """The offline embedding model: WordLlama ``l2_supercat``, 256 dimensions, from the wheel.

    Its id in a store is ``wordllama:l2_supercat``. It never downloads anything: the weights
    and tokenizer are read from the installed ``wordllama`` package's files.

    Returns:
        A pydantic-ai :class:`~pydantic_ai.embeddings.EmbeddingModel`.

    Raises:
        ImportError: WordLlama is not installed; the message names ``memlane[embed]``.

    Example:
        >>> model = local_embedding_model()
        >>> (model.system, model.model_name)
        ('wordllama', 'l2_supercat')
    """
    return LocalEmbeddingModel()
