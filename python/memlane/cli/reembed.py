"""``reembed``: gives every searchable record a vector of the configured embedder.

Vectors of another model are never compared with the query's, so after changing
``MEMLANE_EMBEDDER`` (or on a store written without one) the records of the old model are
found by keyword alone until they are embedded again. ``memlane reembed`` does that for the
whole store: long-term memory's facts of every scope, episodes and procedures
(:meth:`~memlane.longterm.LongTermMemory.reembed`), then the searchable copies of conversation
turns and the strategies' knowledge bases. Each vector is attached only while its record still
holds the text it was made from; a progress bar counts them on a terminal.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memlane.cli.output import CliError, Output, positive_int
from memlane.cli.store import open_manager
from memlane.longterm.namespaces import namespace
from memlane.stores.protocol import SEARCH_TEXT

if TYPE_CHECKING:
    from pydantic_ai.embeddings import Embedder

__all__ = ["CONVERSATION_PREFIXES", "reembed_conversations", "register"]

CONVERSATION_PREFIXES = (
    namespace("longterm", "transcripts", "conversation") + ":",
    namespace("longterm", "knowledge") + ":",
)
"""Namespaces of records conversations keep for search: turns' copies, knowledge-base chunks."""

_ROUND = 10_000  # records listed per round: bounds memory on a store of millions


def reembed_conversations(
    store: Any,
    embedder: Embedder,
    *,
    batch_size: int = 512,
    advance: Callable[[int], object] = lambda n: None,
) -> int:
    """Embeds the turns' copies and knowledge-base chunks of ``store`` that have no vector of
    ``embedder``'s model (long-term memory's own records are ``LongTermMemory.reembed``'s).

    Args:
        store: A :class:`~memlane.stores.protocol.VectorStore`.
        embedder: The embedder (see :func:`~memlane.embeddings.resolve_embedder`).
        batch_size: Texts per embedder call.
        advance: Called with how many vectors each batch attached.

    Returns:
        How many vectors were attached.
    """
    from memlane.embeddings import embed_documents, embedder_id
    from memlane.stores.vectors import EntryVector, text_digest

    model = embedder_id(embedder)
    attached = 0
    for name in sorted(n for n in store.namespaces() if n.startswith(CONVERSATION_PREFIXES)):
        settled: set[str] = set()  # a record the store keeps listing is tried once
        stuck = 0  # tried and still missing: listed first (oldest first), so asked past
        while True:
            listed = store.missing_vectors([name], model, limit=_ROUND + stuck)
            todo = [entry for entry in listed if entry.entry_id not in settled]
            if not todo:
                break
            for start in range(0, len(todo), batch_size):
                batch = todo[start : start + batch_size]
                texts = [entry.metadata[SEARCH_TEXT] for entry in batch]
                made = [
                    EntryVector(entry.entry_id, text_digest(text), vector)
                    for entry, text, vector in zip(
                        batch, texts, embed_documents(embedder, texts), strict=True
                    )
                    if vector is not None
                ]
                settled.update(entry.entry_id for entry in batch)
                saved = store.save_vectors(name, model, made) if made else 0
                stuck += len(batch) - saved
                if saved:
                    attached += saved
                    advance(saved)
    return attached


def reembed(args: argparse.Namespace, out: Output) -> int:
    """Embeds the records without a vector of the configured embedder."""
    from memlane.longterm import LongTermMemory

    with open_manager(args) as manager:
        store = manager.store
        if not callable(getattr(store, "missing_vectors", None)):
            raise CliError(f"{type(store).__name__} keeps no vectors")
        memory = manager.long_term
        if args.embedder is not None:
            memory = LongTermMemory(store, embedder=args.embedder)
        embedder = None if memory is None else memory.embedder
        if memory is None or embedder is None:
            raise CliError(
                "no embedder: pass --embedder local (or a model name), or set MEMLANE_EMBEDDER"
            )
        model = memory.embedding_model
        with out.progress(f"embedding for {model}", None) as advance:
            shown = 0

            def progress(total: int) -> None:
                nonlocal shown
                advance(total - shown)
                shown = total

            attached = memory.reembed(batch_size=args.batch_size, progress=progress)
            attached += reembed_conversations(
                store, embedder, batch_size=args.batch_size, advance=advance
            )
    if out.as_json:
        out.json({"embedded": attached, "model": model})
    else:
        out.text(f"embedded {attached} record{'' if attached == 1 else 's'} for {model}")
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Adds ``reembed`` to the command line."""
    parser = sub.add_parser(
        "reembed",
        parents=[common],
        help="embed the records without a vector of the configured embedder",
        description=(
            "Give every fact, episode, procedure, knowledge-base chunk and conversation turn "
            "kept for search a vector of the embedder (--embedder, else MEMLANE_EMBEDDER): "
            "after changing the embedder, or on a store written without one. Records that "
            "have a vector of that model already are left alone."
        ),
    )
    parser.add_argument(
        "--embedder",
        metavar="NAME",
        default=None,
        help="'local' or a provider:model name (default: MEMLANE_EMBEDDER)",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=512,
        metavar="N",
        help="texts per embedder call (default: 512)",
    )
    parser.set_defaults(func=reembed)
