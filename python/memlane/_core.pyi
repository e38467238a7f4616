"""Type stubs for memlane's Rust extension. Import the public names from ``memlane``."""

from collections.abc import Sequence
from os import PathLike
from typing import Any, Self, TypeAlias, final

__all__ = [
    "ENTRY_FIELDS",
    "BudgetLedger",
    "Encoder",
    "MemoryTable",
    "SearchIndex",
    "SqliteTable",
    "__version__",
    "write_turn",
]

__version__: str

ENTRY_FIELDS: tuple[str, ...]
"""The fields the SQLite table's entry builder sets, in ``MemoryEntry``'s declaration order."""

@final
class Encoder:
    """Counts tokens with one BPE encoding (rank files compiled in), or by the word heuristic.

    The engine behind :class:`memlane.tokens.TokenEstimator`, which validates arguments and
    repairs lone surrogates first; twin of :class:`memlane._pure.tokens.Encoder`. Built only
    through :meth:`exact` and :meth:`heuristic`.
    """

    @staticmethod
    def exact(encoding_name: str) -> Encoder:
        """Exact BPE counts with ``encoding_name`` (``"o200k_base"`` or ``"cl100k_base"``).

        Raises:
            ValueError: An unknown encoding.
        """
    @staticmethod
    def heuristic(tokens_per_word: float) -> Encoder:
        """Whitespace-separated words times ``tokens_per_word``, at least 1 for non-empty text."""
    def count(self, text: str) -> int:
        """Number of tokens in ``text``; the GIL is released for long texts.

        Raises:
            UnicodeEncodeError: ``text`` holds a lone surrogate (it cannot be UTF-8).
        """
    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Token counts of a batch, in order, counted on all cores without the GIL.

        Raises:
            UnicodeEncodeError: A text holds a lone surrogate.
        """

@final
class BudgetLedger:
    """Token counts of a conversation's retained turns and the window that fits the budget.

    The window is the longest run of most recent turns whose counts sum to at most the budget
    left after the summary; every operation keeps it up to date in O(1) amortised time.
    Positions are absolute turn indices: the oldest retained turn is ``offset``, the newest is
    ``end - 1``; eviction from the front advances ``offset``. Twin of
    :class:`memlane._pure.budget.BudgetLedger`.

    Args:
        max_tokens: The budget (> 0).

    Arguments are typed: an ``int`` outside ``0..2**64`` raises ``OverflowError`` and any other
    type ``TypeError`` (the conversation code only passes valid counts).

    Raises:
        ValueError: ``max_tokens`` is 0.
    """

    def __new__(cls, max_tokens: int) -> Self: ...
    @property
    def max_tokens(self) -> int:
        """The budget."""
    @property
    def total(self) -> int:
        """Sum of every retained turn's count."""
    @property
    def window_tokens(self) -> int:
        """Sum of the counts in the window (the summary excluded)."""
    @property
    def reserved(self) -> int:
        """Tokens reserved for the summary (0 when it does not fit and is left out)."""
    @property
    def offset(self) -> int:
        """Absolute index of the oldest retained turn."""
    @property
    def window_start(self) -> int:
        """Absolute index of the oldest turn in the window (``end`` when it is empty)."""
    @property
    def end(self) -> int:
        """Absolute index one past the newest turn."""
    def __len__(self) -> int:
        """Number of retained turns."""
    def push(self, tokens: int) -> None:
        """Appends the newest turn's count and slides the window.

        Args:
            tokens: The turn's token count.
        """
    def pop_front(self, n: int) -> int:
        """Evicts the ``n`` oldest turns.

        Args:
            n: How many turns to evict, from 0 to ``len(self)``.

        Returns:
            The tokens the evicted turns held.

        Raises:
            ValueError: ``n`` is more than the retained turns.
        """
    def set_summary_tokens(self, tokens: int) -> bool:
        """Reserves room for a summary; the window shrinks or grows to fit what is left.

        A summary larger than the whole budget is left out (reserving nothing) rather than
        pushing the history over the budget.

        Args:
            tokens: The summary's token count.

        Returns:
            Whether the summary is included.
        """

@final
class MemoryTable:
    """Entries per namespace in process memory, with a key index (``load_by_key`` is O(1)).

    Payloads are kept as the objects saved. Twin of :class:`memlane._pure.store.MemoryTable`,
    whose module docstring states the rules: saving an ``entry_id`` again replaces it in
    place; an ``entry_id`` held by another namespace moves to the end of this one; a key is
    unique within a namespace (saving it evicts its holder); expired entries are never
    returned but hold their key until removed.

    Namespaces, entry ids and keys must be ``str`` (lone surrogates included: each string is
    its own key, as in a dict); any other type raises ``TypeError``.
    """

    def __new__(cls) -> Self: ...
    def save(
        self,
        namespace: str,
        entry_id: str,
        key: str | None,
        expires_at: float | None,
        payload: Any,
    ) -> None:
        """Inserts or replaces one entry.

        Args:
            namespace: The namespace to save into.
            entry_id: The entry's id, unique across namespaces.
            key: The entry's key, unique within the namespace, or ``None``.
            expires_at: Expiry as Unix seconds, or ``None`` for never.
            payload: The object that ``load`` returns.
        """
    def load(self, namespace: str, now: float) -> list[Any]:
        """Payloads of a namespace unexpired at ``now`` (Unix seconds), in insertion order."""
    def load_by_key(self, namespace: str, key: str, now: float) -> Any:
        """The payload holding ``key``, or ``None`` if there is none or it has expired."""
    def load_by_id(self, namespace: str, entry_id: str, now: float) -> Any:
        """The payload of ``entry_id`` in ``namespace``, or ``None`` if there is none or it
        has expired."""
    def delete(self, namespace: str, entry_id: str) -> bool:
        """Removes an entry of this namespace.

        Returns:
            Whether there was one.
        """
    def clear(self, namespace: str) -> int:
        """Removes every entry of a namespace, expired ones too.

        Returns:
            How many there were.
        """
    def cleanup_expired(self, now: float) -> int:
        """Removes entries expired at ``now`` from every namespace.

        Returns:
            How many were removed.
        """
    def namespaces(self) -> list[str]:
        """Namespaces that hold at least one entry, in creation order.

        A namespace that empties disappears; filled again, it moves to the end.
        """
    def __len__(self) -> int:
        """Number of entries, expired ones included."""

@final
class SearchIndex:
    """Searchable entries with term postings, ranked by BM25: what ``InMemoryStore.search``
    reads.

    Twin of :class:`memlane._pure.search.SearchIndex`; ``rust/src/store/search.rs`` states the
    invariants both keep. Terms arrive already split by
    :func:`memlane.stores.protocol.search_terms` (or, for an ASCII text given to
    ``upsert_text``, are split here exactly as it splits them), so both index the same terms,
    and scores are computed with the same float operations in the same order, so both give
    equal ones.
    A search reads only the postings of the query's terms and releases the GIL while scoring.

    Entry ids and namespaces must be ``str`` (lone surrogates included, as in
    :class:`MemoryTable`), terms a ``list`` of ``str``; any other type raises ``TypeError``.
    """

    def __new__(cls) -> Self: ...
    def upsert(
        self,
        entry_id: str,
        namespace: str,
        terms: list[str],
        importance: float,
        expires_at: float | None,
        payload: Any,
    ) -> None:
        """Indexes a document, replacing the one with the same ``entry_id`` (in any namespace).

        A document replaced within its namespace keeps its age (the last tie-break); one that
        moves namespace becomes the newest.

        Args:
            entry_id: The entry's id, unique across namespaces.
            namespace: The namespace the entry lies in.
            terms: The document's terms in text order, repeats included (its term counts and
                length); an empty list is a document no query finds that still counts in the
                corpus.
            importance: The entry's importance, 0.0–1.0.
            expires_at: Expiry as Unix seconds, or ``None`` for never.
            payload: The object that ``search`` returns.
        """
    def upsert_text(
        self,
        entry_id: str,
        namespace: str,
        text: str,
        importance: float,
        expires_at: float | None,
        payload: Any,
    ) -> bool:
        """``upsert`` of ``text``'s terms when the index splits it itself (an ASCII text: see
        :meth:`ascii_terms`); whether it did. ``False`` changes nothing: the caller splits the
        text with :func:`memlane.stores.protocol.search_terms` and calls ``upsert``."""
    @staticmethod
    def ascii_terms(text: str) -> list[str] | None:
        """The terms ``upsert_text`` indexes ``text`` by: for an ASCII text, the runs of ASCII
        letters and digits, lowercased (what ``search_terms`` gives for it; a test holds the
        two equal); ``None`` for any other text, lone surrogates included."""
    def remove(self, entry_id: str) -> bool:
        """Removes the document of ``entry_id``; whether there was one."""
    def clear(self, namespace: str) -> int:
        """Removes every document of a namespace, expired ones too; how many there were."""
    def cleanup_expired(self, now: float) -> int:
        """Removes documents expired at ``now`` everywhere; how many."""
    def search(
        self,
        namespaces: Sequence[str],
        terms: Sequence[str],
        limit: int,
        min_importance: float,
        now: float,
    ) -> list[tuple[Any, float]]:
        """The best ``limit`` payloads for ``terms`` with their scores, best first.

        A candidate lies in one of ``namespaces``, is unexpired at ``now``, has
        ``importance >= min_importance`` and holds one of ``terms``. Its score sums, over the
        distinct ``terms`` in order, each one's BM25 weight in it, with corpus statistics over
        every document in the index; ties go to importance, then to the oldest document.

        Raises:
            OverflowError: ``limit`` is negative or does not fit in a machine word.
        """
    @property
    def visited(self) -> int:
        """Postings read by every search so far (a search's cost, for tests)."""
    def __len__(self) -> int:
        """Number of documents, expired ones included."""

_Row: TypeAlias = tuple[str, str, str | None, str, str, str, float | None, float, int]
_EntryKit: TypeAlias = tuple[Any, dict[str, Any], Any, Any, Any]

@final
class SqliteTable:
    """The SQLite store: one file (WAL, synchronous=NORMAL), every call one transaction.

    The schema and SQL are those of :class:`memlane._pure.store.SqliteTable`, so either opens a
    file the other wrote. The GIL is released around every SQLite call, so threads overlap.
    Failures raise the twin's exceptions with SQLite's message: ``sqlite3.IntegrityError`` for
    a constraint (an importance outside [0, 1]), ``sqlite3.DatabaseError`` for a corrupt file
    or a stored value of the wrong type, ``sqlite3.OperationalError`` for anything else SQLite
    refuses. A ``str`` holding a lone surrogate raises ``UnicodeEncodeError``, as ``sqlite3``
    does.

    A row is ``(entry_id, scope, key, content, metadata, created_at, expires_at,
    importance, version)``: ``content`` and ``metadata`` are JSON text, ``created_at`` ISO
    text, ``expires_at`` Unix seconds or ``None``, ``version`` the store-assigned version. A
    file made before the version column existed gains it on open, its rows at version 0; one
    made before the search index (``memory_search``, FTS5) gains it on open, filled from its
    rows, once, whichever process opens it first. A writable file table checkpoints its WAL on
    a thread and connection of its own every 160 committed writes (the connection's automatic
    checkpoint kept at 4,000 pages as a backstop); ``close`` and dropping the table stop it
    (twin: :mod:`memlane._pure.sqlite_checkpoint`).

    Args:
        path: The database file; it and its parent directories are created if missing.
            ``":memory:"`` keeps the database in memory.
        read_only: Open the existing file with SQLite's read-only flag: nothing is created,
            switched (journal mode) or migrated, and SQLite refuses every write.

    Raises:
        OSError: A parent directory cannot be created (the errno's subclass, with the
            directory as ``filename``, as ``Path.mkdir`` raises it).
        sqlite3.OperationalError: The file cannot be opened as a database, or (read-only)
            it was made by an older memlane and needs migrating.
        sqlite3.DatabaseError: The database holds tables and none of memlane's, or
            (read-only) none at all; the message begins with ``"not a memlane store"``.
    """

    def __new__(cls, path: str | PathLike[str], read_only: bool = False) -> Self: ...
    def delete_many(self, namespace: str, entry_ids: list[str]) -> list[str]:
        """Removes the entries of this namespace with these ids in one transaction (all or
        none); the ids that existed, in the order given."""
    def save(self, namespace: str, row: _Row) -> None:
        """Upserts one row atomically (same rules as :class:`MemoryTable`).

        Raises:
            ValueError: The table is closed.
            sqlite3.Error: SQLite refused the row.
        """
    def save_many(self, namespace: str, rows: Sequence[_Row]) -> None:
        """Upserts rows in one ``BEGIN IMMEDIATE`` transaction: all of them or none.

        Raises:
            ValueError: The table is closed.
            sqlite3.Error: SQLite refused a row; nothing was written.
        """
    def save_if(self, namespace: str, row: _Row, expected_version: int | None, now: float) -> bool:
        """Upserts ``row`` if the holder of its key unexpired at ``now`` is at
        ``expected_version`` (``None``: there is none); whether it did. The read and the write
        are one ``BEGIN IMMEDIATE`` transaction.

        Raises:
            ValueError: The table is closed.
            sqlite3.Error: SQLite refused the row; nothing was written.
        """
    def save_if_many(self, ops: Sequence[tuple[str, _Row, int | None, float]]) -> list[bool]:
        """Several :meth:`save_if`, in order, in one ``BEGIN IMMEDIATE`` transaction: each
        compares the holder its key has after the ones before it, as if run one by one;
        whether each wrote. An error rolls all of them back (SQLiteStore's group commit)."""
    def load_range(self, namespace: str, start: str, stop: str, now: float) -> list[_Row]:
        """Rows unexpired at ``now`` whose key is in ``[start, stop)``, in code-point order,
        read from the (namespace, key) index.

        Raises:
            ValueError: The table is closed.
        """
    def load(self, namespace: str, now: float) -> list[_Row]:
        """Rows of a namespace unexpired at ``now`` (Unix seconds), in insertion order.

        Raises:
            ValueError: The table is closed.
        """
    def load_by_key(self, namespace: str, key: str, now: float) -> _Row | None:
        """The unexpired row holding ``key``, or ``None``.

        Raises:
            ValueError: The table is closed.
        """
    def load_content_by_key(
        self, namespace: str, key: str, now: float
    ) -> tuple[str, int, str] | None:
        """``(entry_id, version, content)`` of :meth:`load_by_key`'s row, the content as the JSON
        text stored, or ``None``.

        Raises:
            ValueError: The table is closed.
        """
    def load_entries(
        self, namespace: str, now: float, kit: _EntryKit
    ) -> tuple[list[Any], list[int]]:
        """:meth:`load` as ``(items, odd)``: ``MemoryEntry`` objects built from the rows without
        validation (twin of :func:`memlane._pure.store.build_entries`), except at the indices
        in ``odd``, which hold rows the builder does not take for certain, for ``row_to_entry``.
        ``kit`` is ``memlane.stores.sqlite.ENTRY_KIT``. The cyclic GC is paused while a large
        batch is built, and restored as it was; unless objects are frozen, the batch then joins
        the oldest generation (``gc.freeze()``, ``gc.unfreeze()``) rather than costing a young
        collection over all of it.

        Raises:
            ValueError: The table is closed.
        """
    def load_range_entries(
        self, namespace: str, start: str, stop: str, now: float, kit: _EntryKit
    ) -> tuple[list[Any], list[int]]:
        """:meth:`load_range` as ``(items, odd)``, as :meth:`load_entries`."""
    def load_by_key_entry(self, namespace: str, key: str, now: float, kit: _EntryKit) -> Any:
        """:meth:`load_by_key` as a ``MemoryEntry``, or the row (a tuple) for ``row_to_entry``,
        or ``None``."""
    def search(
        self,
        namespaces: Sequence[str],
        terms: Sequence[str],
        limit: int,
        min_importance: float,
        now: float,
    ) -> list[tuple[_Row, float]]:
        """Ranked rows from the FTS5 index of ``metadata.search_text``.

        The rows of ``namespaces`` unexpired at ``now`` with ``importance >= min_importance``
        whose search text holds any of ``terms``: best BM25 first, then highest importance,
        then oldest; at most ``limit``. Each comes with its score (``-bm25()``, > 0, higher is
        better). Each term is quoted as an FTS5 string, so no term acts as syntax; no
        namespaces or no terms give ``[]``. The GIL is released while SQLite works.

        Args:
            namespaces: The namespaces to search (a ``str`` is refused with ``TypeError``).
            terms: The query's terms, already split and folded.
            limit: The most rows returned (a signed 64-bit integer).
            min_importance: The lowest importance returned.
            now: Unix seconds; rows expiring at or before it are left out.

        Raises:
            ValueError: The table is closed.
        """
    def search_texts(
        self, namespace: str, entry_ids: list[str], now: float
    ) -> list[tuple[str, str]]:
        """(entry id, search text) of the unexpired entries among ``entry_ids`` that have one."""
    def save_vectors(
        self,
        namespace: str,
        model: str,
        dims: int,
        items: list[tuple[str, str, str, bytes]],
        now: float,
    ) -> int:
        """Attaches each ``(entry_id, text, digest, float32 bytes)`` whose unexpired entry
        still has ``text`` as its search text, replacing the entry's vector; one
        ``BEGIN IMMEDIATE`` transaction; how many were attached."""
    def vector_search(
        self,
        namespaces: list[str],
        model: str,
        query: list[float],
        limit: int,
        min_importance: float,
        now: float,
    ) -> list[tuple[_Row, float]]:
        """The best ``limit`` rows by dot product of ``query`` with their vector of ``model``
        and ``len(query)`` dimensions, unexpired at ``now`` with ``importance >=
        min_importance``: best first, then importance, then insertion. The GIL is released
        while the vectors are read and scored."""
    def missing_vectors(
        self, namespaces: list[str], model: str, limit: int, now: float
    ) -> list[_Row]:
        """Unexpired rows with a search text and no vector of ``model``, oldest first."""
    def delete(self, namespace: str, entry_id: str) -> bool:
        """Removes an entry of this namespace; whether there was one.

        Raises:
            ValueError: The table is closed.
        """
    def clear(self, namespace: str) -> int:
        """Removes every entry of a namespace; how many there were.

        Raises:
            ValueError: The table is closed.
        """
    def cleanup_expired(self, now: float) -> int:
        """Removes entries expired at ``now`` everywhere; how many.

        Raises:
            ValueError: The table is closed.
        """
    def namespaces(self) -> list[str]:
        """Namespaces that hold at least one entry, in order of their oldest entry.

        Raises:
            ValueError: The table is closed.
        """
    def close(self) -> None:
        """Closes the connection; closing again does nothing, any other call raises
        ``ValueError("SqliteTable is closed")``."""

@final
class VectorIndex:
    """Entries' unit vectors grouped by (model, dimensions), scored by exact dot products:
    what ``InMemoryStore.vector_search`` reads.

    Twin of :class:`memlane._pure.vector_index.VectorIndex`; ``rust/src/vectors.rs`` states
    the invariants both keep. An entry has at most one vector; a search reads only the rows of
    its model and dimensions (contiguous float32), never another's, and releases the GIL while
    scoring. Scores are float32 dot products summed in eight lanes, the twin's to the bit
    without numpy and to float32 rounding with it. Vectors arrive checked and unit length
    (:func:`memlane.stores.vectors.unit`): the index applies no policy.
    """

    def __new__(cls) -> Self: ...
    def upsert(
        self,
        entry_id: str,
        namespace: str,
        model: str,
        digest: str,
        vector: Sequence[float],
        importance: float,
        expires_at: float | None,
        payload: Any,
    ) -> None:
        """Attaches ``vector`` of ``model`` to ``entry_id``, replacing any vector it had (of
        any model); one replaced within its namespace keeps its age (the last tie-break).

        Args:
            entry_id: The entry's id, unique across namespaces.
            namespace: The namespace the entry lies in.
            model: The embedder's id.
            digest: ``text_digest`` of the text the vector was made from.
            vector: The floats (stored as float32): a float32 buffer (``array("f")``, a
                numpy row), copied as one block, or any sequence of floats.
            importance: The entry's importance, 0.0–1.0.
            expires_at: Expiry as Unix seconds, or ``None`` for never.
            payload: The object that ``search`` returns.
        """
    def refresh(
        self,
        entry_id: str,
        namespace: str,
        digest: str,
        importance: float,
        expires_at: float | None,
        payload: Any,
    ) -> bool:
        """After the entry was saved again: keeps its vector, with the new importance, expiry
        and payload, if it is still in ``namespace`` with the text of ``digest``; else drops
        it. Whether it was kept (``False`` too when it had none)."""
    def remove(self, entry_id: str) -> bool:
        """Drops ``entry_id``'s vector; whether it had one."""
    def clear(self, namespace: str) -> int:
        """Drops the vectors of a namespace's entries; how many."""
    def cleanup_expired(self, now: float) -> int:
        """Drops the vectors of entries expired at ``now``; how many."""
    def model_of(self, entry_id: str) -> str | None:
        """The model of ``entry_id``'s vector, or ``None``."""
    def search(
        self,
        namespaces: Sequence[str],
        model: str,
        query: Sequence[float],
        limit: int,
        min_importance: float,
        now: float,
    ) -> list[tuple[Any, float]]:
        """The best ``limit`` payloads by dot product with ``query``, with their scores.

        A candidate lies in one of ``namespaces``, is unexpired at ``now``, has
        ``importance >= min_importance`` and a vector of ``model`` with ``len(query)``
        dimensions; ties go to importance, then to the oldest vector.
        """
    def __len__(self) -> int: ...

def write_turn(
    messages: object,
    known: dict[type, Any],
    turn_id: int,
    user_prompt: str,
    assistant_response: str,
    timestamp: str,
    token_estimate: int,
) -> tuple[list[Any], bytes, str] | None:
    """A turn's JSON, written straight from its pydantic-ai messages (the twin is
    ``memlane._pure.message_json.write_turn``).

    Args:
        messages: The turn's messages (a ``list``).
        known: The classes checked against pydantic, each with its ``MessageClass``
            (``memlane._pure.message_json``); only these are written.
        turn_id: The turn's id.
        user_prompt: The turn's prompt.
        assistant_response: The turn's response.
        timestamp: The turn's timestamp, already in its JSON form.
        token_estimate: The turn's token estimate.

    Returns:
        ``(raw, messages, text)``: the messages' ``dump_python(mode="json")`` form, their JSON
        text, and the turn's JSON text (``turn_json``'s object without metadata), each what
        pydantic writes, byte for byte. ``None`` for anything the writer does not take for
        certain (a class not in ``known``, an attribute the class does not declare, a subclass
        of a builtin, a non-finite float, a lone surrogate, an offset with seconds, deep
        nesting, any exception on the way): the caller then asks pydantic. The GIL is held
        throughout: every step reads or makes Python objects.
    """
