"""Per-model calibration of memlane's token counts against what providers report.

memlane counts with o200k; a model whose tokenizer splits the same text into more tokens
(or whose provider adds framing around messages and tools) is sent more than memlane
counted. After every model request the provider's reported ``input_tokens`` is compared
with memlane's count of what was sent, and the ratio, smoothed, scales later counts.

Ratios live in the store (namespace ``calibration``, one entry per model name) and are
updated with the store's compare-and-swap, so hosts sharing a store learn together and a
new process starts calibrated.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from memlane._runner import LoadByKey, Plan, SaveIf, run_async, run_sync
from memlane.types import MemoryEntry, MemoryScope

__all__ = ["Calibration"]

logger = logging.getLogger("memlane")

_ROUNDS = 32
"""How often an observation is merged again after other hosts updated the ratio first (each
loss means another host's update won, so the hosts together always make progress)."""


class Calibration:
    """Ratios of provider-reported input tokens to memlane's counts, per model, in a store.

    ``ratio(model)`` starts at 1.0. Each :meth:`observe` moves it toward the reported/counted
    ratio of one request by an exponential moving average whose weight is at least
    ``1 / samples`` (so the first observations count fully and later ones by ``smoothing``),
    clamped to ``bounds``.

    Args:
        store: Where ratios persist (any memlane store; the memory's own, usually).
        namespace: The store namespace ratios are kept in.
        smoothing: Weight of a new observation once many were seen (0 < smoothing <= 1).
        bounds: The lowest and highest ratio accepted (a provider reporting nonsense cannot
            make the budget useless).

    Raises:
        ValueError: ``smoothing`` or ``bounds`` out of range.

    Example:
        >>> from memlane import InMemoryStore
        >>> from memlane.agents import Calibration
        >>> calibration = Calibration(InMemoryStore())
        >>> calibration.observe("my-model", counted=100, reported=130)
        1.3
        >>> calibration.scale("my-model", 1000)
        1300
    """

    def __init__(
        self,
        store: Any,
        *,
        namespace: str = "calibration",
        smoothing: float = 0.3,
        bounds: tuple[float, float] = (0.5, 3.0),
    ) -> None:
        if not isinstance(smoothing, int | float) or not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing!r}")
        low, high = bounds
        if not 0 < low <= 1 <= high < math.inf:
            raise ValueError(f"bounds must satisfy 0 < low <= 1 <= high, got {bounds!r}")
        self.store = store
        self.namespace = namespace
        self.smoothing = float(smoothing)
        self.bounds = (float(low), float(high))
        self._ratios: dict[str, float] = {}

    # ------------------------------------------------------------------ plans

    def _load_plan(self, model_name: str) -> Plan[float]:
        if model_name in self._ratios:
            return self._ratios[model_name]
        entry: MemoryEntry | None = yield LoadByKey(self.namespace, model_name)
        ratio = self._ratio_of(entry)
        self._ratios[model_name] = ratio
        return ratio

    def _observe_plan(self, model_name: str, counted: int, reported: int) -> Plan[float]:
        sample = min(max(reported / counted, self.bounds[0]), self.bounds[1])
        for _ in range(_ROUNDS):
            entry: MemoryEntry | None = yield LoadByKey(self.namespace, model_name)
            samples = 0 if entry is None else int(entry.content.get("samples", 0))
            weight = max(self.smoothing, 1 / (samples + 1))
            ratio = self._ratio_of(entry)
            ratio = min(max(ratio + weight * (sample - ratio), self.bounds[0]), self.bounds[1])
            new = MemoryEntry(
                scope=MemoryScope.WORKING,
                key=model_name,
                content={"ratio": ratio, "samples": samples + 1},
            )
            expected = None if entry is None else entry.version
            if (yield SaveIf(self.namespace, new, expected)):
                self._ratios[model_name] = ratio
                return ratio
        # Every round lost to another host's update: theirs stands, this sample is dropped.
        logger.warning("memlane: calibration of %r kept changing; sample dropped", model_name)
        return (yield from self._reload_plan(model_name))

    def _reload_plan(self, model_name: str) -> Plan[float]:
        self._ratios.pop(model_name, None)
        return (yield from self._load_plan(model_name))

    def _ratio_of(self, entry: MemoryEntry | None) -> float:
        if entry is None or not isinstance(entry.content, dict):
            return 1.0
        value = entry.content.get("ratio")
        if not isinstance(value, int | float) or not math.isfinite(value):
            return 1.0
        return min(max(float(value), self.bounds[0]), self.bounds[1])

    @staticmethod
    def _check(model_name: object, counted: object, reported: object) -> tuple[str, int, int]:
        if not isinstance(model_name, str) or not model_name:
            raise ValueError(f"model_name must be a non-empty str, got {model_name!r}")
        for name, value in (("counted", counted), ("reported", reported)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        return model_name, counted, reported  # type: ignore[return-value]  # checked above

    # ------------------------------------------------------------------ public

    def ratio(self, model_name: str) -> float:
        """The model's ratio of reported to counted tokens (1.0 until observed).

        Read from the store once per model, then from this object's cache (refreshed by
        every :meth:`observe`).
        """
        return run_sync(self._load_plan(model_name), self.store)

    async def async_ratio(self, model_name: str) -> float:
        """Async :meth:`ratio`."""
        return await run_async(self._load_plan(model_name), self.store)

    def scale(self, model_name: str, tokens: int) -> int:
        """``tokens`` as the model would count them: ``ceil(tokens * ratio(model_name))``."""
        return math.ceil(tokens * self.ratio(model_name))

    def observe(self, model_name: str, *, counted: int, reported: int) -> float:
        """Merges one request's reported input tokens into the model's ratio.

        Args:
            model_name: The model that served the request.
            counted: memlane's count of what was sent.
            reported: The provider's ``input_tokens`` for it.

        Returns:
            The model's new ratio.

        Raises:
            ValueError: An empty model name, or a count that is not a positive ``int``.
        """
        plan = self._observe_plan(*self._check(model_name, counted, reported))
        return run_sync(plan, self.store)

    async def async_observe(self, model_name: str, *, counted: int, reported: int) -> float:
        """Async :meth:`observe`."""
        plan = self._observe_plan(*self._check(model_name, counted, reported))
        return await run_async(plan, self.store)
