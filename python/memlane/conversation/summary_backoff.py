"""When a summarizer fails: back off per conversation, and say how its summary stands.

A provider that is down fails every call. Trying again at every turn past the threshold
would wait for it each time (inline) and fill the log, so a conversation whose summary
failed is not summarised again before a delay that doubles with each failure in a row, up
to a cap. Meanwhile the history still fits the budget: the oldest turns leave the prompt
(they stay in the store and the transcript) and are folded in by the next summary that
succeeds. Success, this host's or a summary another host of a fleet committed, ends the
backoff.

The state is this host's: hosts of a fleet back off on their own, and each learns of
another's summary from the shared log.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from memlane.types import utc_now

logger = logging.getLogger("memlane")

__all__ = ["BACKOFF_CAP", "BACKOFF_INITIAL", "SummaryBackoff", "SummaryStatus", "summarizer_name"]

BACKOFF_INITIAL = 1.0
"""Seconds before the first retry of a conversation's failed summary."""

BACKOFF_CAP = 300.0
"""The longest wait between two attempts, however many failed in a row."""

monotonic = time.monotonic
"""The clock delays are measured with (module-level, so a test can stand in its own)."""


@dataclass(frozen=True, slots=True)
class SummaryStatus:
    """How a conversation's rolling summary stands on this host.

    Attributes:
        state: ``"ok"``: nothing waits to be summarised; ``"pending"``: turns wait to be
            folded into the summary (or a background summary runs); ``"failing"``: the
            summarizer failed and the conversation is backed off.
        pending_turns: Turns past the threshold (or out of the history) waiting to be
            folded in.
        failing_since: When the current run of failures began (``None`` unless failing).
        last_error: The last failure, as ``"ExceptionType: message"`` (``None`` unless
            failing).
        failures: Failures in a row.
        retry_at: When the summary is tried again at the earliest (the next turn after it
            tries; ``None`` unless failing).
    """

    state: Literal["ok", "pending", "failing"]
    pending_turns: int = 0
    failing_since: datetime | None = None
    last_error: str | None = None
    failures: int = 0
    retry_at: datetime | None = None


def summarizer_name(summarizer: object) -> str:
    """What a failure report calls the summarizer: its model's name, else its own."""
    model_name = getattr(summarizer, "model_name", None)
    if isinstance(model_name, str):
        return model_name
    name = getattr(summarizer, "__qualname__", None) or type(summarizer).__qualname__
    return str(name)


@dataclass(slots=True)
class _Failing:
    failures: int
    since: datetime
    last_error: str
    retry_after: float  # monotonic seconds
    retry_at: datetime
    summarized: int  # the conversation's summarized_turns when it failed


class SummaryBackoff:
    """The conversations of one memory whose summarizer failed, and when to try again.

    Args:
        initial: Seconds before the first retry.
        cap: The longest delay.
    """

    __slots__ = ("_cap", "_failing", "_initial")

    def __init__(self, initial: float = BACKOFF_INITIAL, cap: float = BACKOFF_CAP) -> None:
        self._initial = initial
        self._cap = cap
        self._failing: dict[str, _Failing] = {}

    def _current(self, cid: str, summarized: int) -> _Failing | None:
        failing = self._failing.get(cid)
        if failing is not None and failing.summarized != summarized:
            # A summary was committed since (by another host, or the conversation was
            # cleared): the summarizer works again.
            del self._failing[cid]
            return None
        return failing

    def ready(self, cid: str, summarized: int) -> bool:
        """Whether conversation ``cid`` (its summary covering ``summarized`` turns) may be
        summarised now."""
        failing = self._current(cid, summarized)
        return failing is None or monotonic() >= failing.retry_after

    def failed(
        self,
        cid: str,
        summarized: int,
        error: BaseException | str,
        summarizer: object,
        waiting: int,
    ) -> None:
        """Records a failure and reports it in one line (no traceback: the same failure at
        every retry would bury the log)."""
        failing = self._current(cid, summarized)
        failures = 1 if failing is None else failing.failures + 1
        delay = min(self._cap, self._initial * 2 ** min(failures - 1, 62))
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        now = utc_now()
        self._failing[cid] = _Failing(
            failures,
            now if failing is None else failing.since,
            text,
            monotonic() + delay,
            now + timedelta(seconds=delay),
            summarized,
        )
        logger.warning(
            "memlane: summarizer failed for conversation %r (model %s): %s; %d %s "
            "to be summarised, next attempt in %gs",
            cid,
            summarizer_name(summarizer),
            text.splitlines()[0] if text else text,
            waiting,
            "turn waits" if waiting == 1 else "turns wait",
            delay,
        )

    def succeeded(self, cid: str) -> None:
        """A summary of ``cid`` committed: the next failure starts from the first delay."""
        self._failing.pop(cid, None)

    def forget(self, cid: str) -> None:
        """Drops what is known of ``cid`` (cleared)."""
        self._failing.pop(cid, None)

    def status(self, cid: str, summarized: int, pending: int, running: bool) -> SummaryStatus:
        """The status of ``cid``, with ``pending`` turns waiting and whether a background
        summary of it runs."""
        failing = self._current(cid, summarized)
        if failing is not None:
            return SummaryStatus(
                "failing",
                pending,
                failing.since,
                failing.last_error,
                failing.failures,
                failing.retry_at,
            )
        return SummaryStatus("pending" if pending or running else "ok", pending)
