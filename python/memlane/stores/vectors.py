"""Vectors beside entries: what a :class:`~memlane.stores.protocol.VectorStore` keeps and checks.

A vector is attached to one entry and says which text it was made from (:func:`text_digest` of
the entry's ``metadata["search_text"]``), so a store can refuse a vector whose text has since
changed: a writer that embedded an old text never overwrites the newer one's meaning. Every
vector a store keeps is unit length (:func:`unit`), so a dot product is the cosine similarity,
and is stored as float32 little-endian bytes (:func:`encode_vector`) on every platform.

The ``model`` string kept beside each vector is the embedder's id (``"wordllama:l2_supercat"``):
vectors of different models, or of different dimensions, are never compared.

This module imports nothing heavy (no numpy): every store and the operations' layer use it.
"""

from __future__ import annotations

import functools
import hashlib
import math
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from numbers import Real
from typing import NamedTuple

from memlane._validate import check_identifier, check_str, type_name
from memlane.stores.protocol import check_search

__all__ = [
    "EntryVector",
    "check_entry_vectors",
    "check_missing_vectors",
    "check_model",
    "check_query_vector",
    "check_vector_search",
    "decode_vector",
    "encode_vector",
    "text_digest",
    "unit",
]


class EntryVector(NamedTuple):
    """A vector for one entry, as a writer hands it to ``save_vectors``.

    Attributes:
        entry_id: The entry it belongs to.
        digest: :func:`text_digest` of the search text the vector was made from; the store
            attaches the vector only while the entry still has that text.
        vector: The embedding, unit length (pass :func:`unit`'s output).
    """

    entry_id: str
    digest: str
    vector: Sequence[float]


def text_digest(text: str) -> str:
    """The digest a vector carries of the text it was made from: hex BLAKE2b, 16 bytes.

    ``surrogatepass`` so every Python ``str`` a store accepts has a digest (a lone surrogate
    would otherwise fail to encode). The latest short texts' digests are kept: a writer
    digests a batch, then the store digests the same texts again to check each vector against
    its entry, and the in-memory store once more when an entry is saved.

    Args:
        text: The entry's search text.

    Returns:
        32 lowercase hex characters.
    """
    if len(text) <= _KEPT_TEXT:
        return _kept_digest(text)
    return _digest(text)


_KEPT_TEXT = 1024
"""The longest text whose digest is kept: 4,096 of them hold at most ~4 MB of text alive."""


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


_kept_digest = functools.lru_cache(maxsize=4096)(_digest)


_FLOAT = frozenset({float})
_PLAIN = frozenset({float, int})


def _floats(vector: object, name: str) -> tuple[list[float], float]:
    """The floats of ``vector`` (a new list) and their Euclidean length."""
    if type(vector) is array and vector.typecode == "f":
        return _float32s(vector, name)
    # A writer hands over thousands of 256-float lists a second: a list or tuple of plain
    # numbers is checked by C-level passes (their types at once, finiteness through hypot).
    if isinstance(vector, list | tuple) and vector:
        kinds = set(map(type, vector))
        if kinds <= _PLAIN:
            values = list(vector) if kinds == _FLOAT else list(map(float, vector))
            norm = math.hypot(*values)  # correctly scaled: no overflow or underflow inside
            if math.isfinite(norm):
                return values, norm
    # numpy arrays and pydantic-ai's embedding rows are iterables of real numbers but not
    # always Sequences; a str or a mapping is never a vector.
    if isinstance(vector, str | bytes | bytearray | Mapping) or not isinstance(vector, Iterable):
        raise TypeError(f"{name} must be a sequence of floats, not {type_name(vector)}")
    values = []
    for x in vector:
        if isinstance(x, bool) or not isinstance(x, Real):
            raise TypeError(f"{name} must hold numbers, not {type_name(x)}")
        values.append(float(x))
    if not values:
        raise ValueError(f"{name} must not be empty")
    if not all(math.isfinite(x) for x in values):
        raise ValueError(f"{name} must hold finite numbers (no NaN or infinity)")
    return values, math.hypot(*values)


def _float32s(vector: array[float], name: str) -> tuple[list[float], float]:
    """:func:`_floats` of a float32 ``array``."""
    return vector.tolist(), _float32_norm(vector, name)


def _float32_norm(vector: array[float], name: str) -> float:
    """The length of a float32 ``array``: no per-item type checks (every item is a float),
    finiteness through the length (``hypot`` is NaN or infinite when an item is)."""
    if not vector:
        raise ValueError(f"{name} must not be empty")
    norm = math.hypot(*vector)
    if not math.isfinite(norm):
        raise ValueError(f"{name} must hold finite numbers (no NaN or infinity)")
    return norm


def _unit_row(vector: Sequence[float]) -> Sequence[float]:
    """:func:`unit` that keeps a float32 ``array`` one (a copy, a contiguous buffer the
    stores encode or copy as it is): what a writer of the local model hands over."""
    if type(vector) is not array or vector.typecode != "f":
        return unit(vector)
    norm = _float32_norm(vector, "vector")
    if not norm:
        raise ValueError(f"vector must have a direction, got one of length {norm!r}")
    if abs(norm - 1.0) <= _UNIT:
        return array("f", vector)
    return array("f", [x / norm for x in vector])


def check_query_vector(vector: object) -> list[float]:
    """The ``vector`` argument of ``vector_search``: a non-empty sequence of finite numbers.

    Raises:
        TypeError: Not a sequence (a ``str`` is not one), or an item is not a number.
        ValueError: Empty, or holding NaN or infinity.
    """
    return _floats(vector, "vector")[0]


_UNIT = 1e-7
"""How far from 1 a length may be and count as 1: below float32's resolution, in which every
store keeps vectors, so scaling by it would change no stored bit that matters."""


def unit(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to length 1 (a copy), so a dot product of two is their cosine.

    A vector already of length 1 (within :data:`_UNIT`) is copied as it is: what an embedder
    returns, or a vector this function made, costs no second pass.

    Raises:
        TypeError: Not a sequence of numbers.
        ValueError: Empty, zero length, or holding NaN or infinity: it has no direction.
    """
    values, norm = _floats(vector, "vector")
    if not norm or not math.isfinite(norm):
        raise ValueError(f"vector must have a direction, got one of length {norm!r}")
    if abs(norm - 1.0) <= _UNIT:
        return values
    return [x / norm for x in values]


def encode_vector(vector: Sequence[float]) -> bytes:
    """``vector`` as float32 little-endian bytes, as every store keeps it.

    Raises:
        OverflowError: A value beyond float32's range.
    """
    packed = array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def decode_vector(data: bytes) -> list[float]:
    """The floats of :func:`encode_vector`'s bytes.

    Raises:
        ValueError: ``data``'s length is not a multiple of 4.
    """
    if len(data) % 4:
        raise ValueError(f"a stored vector must be a multiple of 4 bytes, got {len(data)}")
    packed = array("f")
    packed.frombytes(data)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tolist()


def check_model(model: object) -> str:
    """The ``model`` argument of the vector operations: the embedder's id.

    Raises:
        TypeError: Not a ``str``.
        ValueError: Empty, or containing NUL.
    """
    return check_identifier(model, "model")


def check_entry_vectors(vectors: object) -> list[EntryVector]:
    """The ``vectors`` argument of ``save_vectors``, each vector made unit length (a list of
    floats, or a float32 ``array`` for one given as such).

    Every vector of one call has the same dimensions: one writer embeds with one model.

    Raises:
        TypeError: ``vectors`` is not a sequence of :class:`EntryVector`, or a field has the
            wrong type.
        ValueError: A vector without a direction, or vectors of different dimensions.
    """
    if isinstance(vectors, str | bytes) or not isinstance(vectors, Sequence):
        raise TypeError(f"vectors must be a list of EntryVector, not {type_name(vectors)}")
    checked: list[EntryVector] = []
    for item in vectors:
        if not isinstance(item, EntryVector):
            raise TypeError(f"vectors must hold EntryVector, not {type_name(item)}")
        entry_id = check_str(item.entry_id, "entry_id")
        digest = check_str(item.digest, "digest")
        vector = _unit_row(item.vector)
        if checked and len(vector) != len(checked[0].vector):
            raise ValueError(
                f"vectors must all have the same dimensions: {len(checked[0].vector)} and "
                f"{len(vector)} in one call"
            )
        checked.append(EntryVector(entry_id, digest, vector))
    return checked


def check_vector_search(
    namespaces: object, vector: object, model: object, limit: object, min_importance: object
) -> tuple[list[str], list[float], str, int, float]:
    """The checked arguments of ``vector_search``: namespaces, limit and minimum as
    :func:`~memlane.stores.protocol.check_search` checks them, the query vector made unit
    length, and the model.

    Raises:
        TypeError: As ``check_search``; ``vector`` not a sequence of numbers; ``model`` not a
            ``str``.
        ValueError: As ``check_search``; ``vector`` empty, zero or not finite; ``model`` empty
            or holding NUL.
    """
    names, _, limit, min_importance = check_search(namespaces, "", limit, min_importance)
    query = unit(check_query_vector(vector))
    return names, query, check_model(model), limit, min_importance


def check_missing_vectors(
    namespaces: object, model: object, limit: object
) -> tuple[list[str], str, int]:
    """The checked arguments of ``missing_vectors``.

    Raises:
        TypeError, ValueError: As :func:`check_vector_search`, named.
    """
    names, _, limit, _ = check_search(namespaces, "", limit, 0.0)
    return names, check_model(model), limit
