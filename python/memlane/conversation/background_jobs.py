"""The summaries and fact extractions a :class:`~memlane.ConversationMemory` runs in the
background, and waiting for them (``flush``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from memlane._locks import running_loop

Job = concurrent.futures.Future[None] | asyncio.Task[None]
"""A background job: a worker thread's future (sync callers) or a task on a caller's loop."""


class BackgroundJobs:
    """The jobs of one memory not yet known to be done.

    ``summaries`` maps a conversation id to its one summary in flight; extractions may be
    several per conversation. Jobs start and end in any thread, so the set of extractions is
    guarded; a summary's entry is added and removed under its conversation's lock.
    """

    __slots__ = ("_extracting", "_guard", "summaries")

    def __init__(self) -> None:
        self.summaries: dict[str, Job] = {}
        self._extracting: set[Job] = set()
        self._guard = threading.Lock()

    def busy(self, cid: str) -> bool:
        """Whether a summary of conversation ``cid`` is in flight."""
        return cid in self.summaries

    def add_extraction(self, job: Job) -> None:
        """Tracks a fact extraction until :meth:`flush` sees it done."""
        with self._guard:
            self._extracting = {j for j in self._extracting if not j.done()}
            self._extracting.add(job)

    def pending(self) -> list[Job]:
        """The jobs not yet known to be done."""
        with self._guard:
            self._extracting = {job for job in self._extracting if not job.done()}
            return [*self.summaries.values(), *self._extracting]

    def forget(self, job: Job, *, force: bool = False) -> None:
        """Stops tracking ``job`` once it is done (or when it never can be, ``force``)."""
        if not (force or job.done()):
            return
        with self._guard:
            self._extracting.discard(job)
        for cid, pending in list(self.summaries.items()):
            if pending is job:
                self.summaries.pop(cid, None)

    def flush(self) -> None:
        """Waits until every job is done (see :meth:`ConversationMemory.flush`).

        Raises:
            RuntimeError: Called on an event loop's thread while a job runs as a task of that
                loop (waiting would stop it).
        """
        while self.pending():
            for job in self.pending():
                if isinstance(job, concurrent.futures.Future):
                    concurrent.futures.wait([job])
                elif not job.done() and not job.get_loop().is_closed():
                    loop = job.get_loop()
                    if loop is running_loop():
                        raise RuntimeError(
                            "flush() inside the event loop that runs a background summary "
                            "would stop it; use await async_flush()"
                        )
                    if loop.is_running():
                        asyncio.run_coroutine_threadsafe(asyncio.wait([job]), loop).result()
                    else:  # a stopped loop cannot finish it: nothing to wait for
                        self.forget(job, force=True)
                # A job removes itself when it ends; one that was cancelled may not have.
                self.forget(job)

    async def async_flush(self) -> None:
        """Awaits every job (see :meth:`ConversationMemory.async_flush`)."""
        loop = asyncio.get_running_loop()
        while self.pending():
            for job in self.pending():
                if isinstance(job, concurrent.futures.Future):
                    await asyncio.wait([asyncio.wrap_future(job)])
                elif job.get_loop() is loop:
                    await asyncio.wait([job])
                elif not job.done() and job.get_loop().is_running():
                    waiting = asyncio.run_coroutine_threadsafe(asyncio.wait([job]), job.get_loop())
                    await asyncio.wait([asyncio.wrap_future(waiting)])
                else:  # done, or on a stopped loop that cannot finish it
                    self.forget(job, force=True)
                self.forget(job)
