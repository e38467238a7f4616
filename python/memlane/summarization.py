"""LLM summaries of evicted turns: a rolling summary that reaches the model and stays bounded.

:meth:`LLMSummarizer.from_config` returns the ``summarizer`` a
:class:`~memlane.ConversationMemory` (or :class:`~memlane.MemoryManager`) calls when turns
leave the budget. It asks a throwaway pydantic-ai agent to fold the previous summary and the
evicted turns into a new summary, cuts the answer to ``max_summary_tokens`` (a rolling summary
would otherwise grow with every fold), and falls back to a deterministic extractive summary
when the model fails.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from memlane._deprecation import deprecated_alias
from memlane.tokens import TokenEstimator
from memlane.types import ConversationTurn, strings_only

if TYPE_CHECKING:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models import Model

# pydantic-ai is imported when a summary is asked of a model or turns carry tool calls.

__all__ = [
    "DEFAULT_PROMPT_TEMPLATE",
    "DEFAULT_SUMMARY_MODEL",
    "LLMSummarizer",
    "create_llm_summarizer",
    "fit_tokens",
    "format_turns",
]

logger = logging.getLogger("memlane")

DEFAULT_SUMMARY_MODEL = "openai:gpt-4o-mini"
"""The model asked for summaries when none is given."""

DEFAULT_PROMPT_TEMPLATE = """\
You keep the running summary of a conversation between a user and an AI assistant.
Fold the previous summary (if any) and the new turns below into one updated summary.
Keep every fact, name, number, preference, decision and open question the user may come back
to; drop greetings and filler. Write plain prose or short bullet points.
Use at most {max_summary_tokens} tokens and answer with the summary only.

{turns_text}"""
"""The default ``prompt_template``.

``{turns_text}`` is required in a template, ``{max_summary_tokens}`` optional."""

_ELISION = "\n[…]\n"
_PIECES = re.compile(r"\S+\s*|\s+")
_CLIP_CHARS = 2000  # of one prompt, answer or tool result in the summarizer's input
_EXTRACT_CHARS = 200  # of one prompt or answer in the extractive fallback


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _prefix_within(pieces: list[str], budget: int, estimator: TokenEstimator) -> int:
    """How many leading ``pieces`` fit in ``budget`` tokens (binary search)."""
    lo, hi = 0, len(pieces)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimator.estimate("".join(pieces[:mid])) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _cut(
    pieces: list[str], max_tokens: int, estimator: TokenEstimator, *, both: bool
) -> str | None:
    """Leading and trailing ``pieces`` around ``[…]`` within ``max_tokens``.

    ``None`` when nothing fits, or, with ``both``, when either side would be empty.
    """
    available = max_tokens - estimator.estimate(_ELISION)
    if available < 2:
        return None
    head_n = _prefix_within(pieces, available // 2, estimator)
    head = "".join(pieces[:head_n]).rstrip()
    rest = pieces[head_n:][::-1]
    tail_n = _prefix_within(rest, available - estimator.estimate(head), estimator)
    # Counts are not additive across the joins: shrink the tail until the whole fits.
    while tail_n >= 0:
        tail = "".join(rest[:tail_n][::-1]).strip()
        cut = head + _ELISION + tail
        # A rolling summary is cut again and again: earlier elisions next to this one merge.
        while _ELISION + "[…]\n" in cut or "\n[…]" + _ELISION in cut:
            cut = cut.replace(_ELISION + "[…]\n", _ELISION).replace("\n[…]" + _ELISION, _ELISION)
        if estimator.estimate(cut) <= max_tokens:
            return cut if (head and tail) or (not both and (head or tail)) else None
        tail_n -= 1
    return None


def fit_tokens(text: str, max_tokens: int, estimator: TokenEstimator) -> str:
    """``text`` cut to at most ``max_tokens`` tokens, keeping its beginning and its end.

    The middle is replaced by ``[…]``: in a rolling summary the oldest facts sit at the start
    and the newest at the end, and both matter more than what came between. Whole lines are
    dropped when that leaves something on either side, else the cuts fall on whitespace.
    Deterministic.

    Args:
        text: What to cut.
        max_tokens: The budget (> 0).
        estimator: Counts the tokens.

    Returns:
        ``text`` itself when it fits, else the cut text (never more than ``max_tokens``).
    """
    if estimator.estimate(text) <= max_tokens:
        return text
    cut = _cut(text.splitlines(keepends=True), max_tokens, estimator, both=True)
    if cut is not None:
        return cut
    words = _PIECES.findall(text)
    cut = _cut(words, max_tokens, estimator, both=False)
    if cut is not None:
        return cut
    return "".join(words[: _prefix_within(words, max_tokens, estimator)]).rstrip()


def _message_lines(messages: Sequence[ModelMessage]) -> list[str]:
    if not messages:
        return []
    from pydantic_ai.messages import BaseToolCallPart, BaseToolReturnPart

    lines: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, BaseToolCallPart):
                lines.append(
                    f"Tool call: {part.tool_name}({_clip(part.args_as_json_str(), _CLIP_CHARS)})"
                )
            elif isinstance(part, BaseToolReturnPart):
                result = _clip(part.model_response_str(), _CLIP_CHARS)
                lines.append(f"Tool result ({part.tool_name}): {result}")
    return lines


def format_turns(turns: Sequence[ConversationTurn]) -> str:
    """The ``{turns_text}`` of the prompt: the previous summary, then each turn with its tools.

    A leading turn with ``metadata={"summary": True}`` is the previous summary (that is how
    :class:`~memlane.ConversationMemory` passes it).

    Args:
        turns: The previous summary (optional) and the evicted turns, oldest first.

    Returns:
        The text, tool calls and results included, each piece clipped.
    """
    blocks: list[str] = []
    new_turns = list(turns)
    if new_turns and new_turns[0].metadata.get("summary"):
        blocks.append("Previous summary:\n" + new_turns.pop(0).assistant_response)
    lines = ["New turns:"]
    for turn in new_turns:
        lines.append(f"[turn {turn.turn_id}]")
        lines.append(f"User: {_clip(turn.user_prompt, _CLIP_CHARS)}")
        if not strings_only(turn):  # the two messages of its strings carry no tool calls
            lines.extend(_message_lines(turn.raw_messages))
        lines.append(f"Assistant: {_clip(turn.assistant_response, _CLIP_CHARS)}")
    blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


class LLMSummarizer:
    """A summarizer that asks a pydantic-ai model; made by :meth:`LLMSummarizer.from_config`.

    Called as ``summarizer(turns)`` from sync code and awaited as
    ``await summarizer.async_summarize(turns)`` from async code (which
    :meth:`ConversationMemory.async_add_turn <memlane.ConversationMemory.async_add_turn>`
    does): inside an event loop it never starts a nested loop or a thread of its own.

    Attributes:
        model: The model asked (a pydantic-ai model string or :class:`~pydantic_ai.models.Model`).
        prompt_template: The prompt, with ``{turns_text}`` (and optionally
            ``{max_summary_tokens}``).
        max_summary_tokens: The most tokens a summary may have, enforced.
        estimator: Counts summary tokens; use the memory's.
    """

    def __init__(
        self,
        *,
        model: Model | str,
        prompt_template: str,
        max_summary_tokens: int,
        estimator: TokenEstimator,
    ) -> None:
        self.model = model
        self.prompt_template = prompt_template
        self.max_summary_tokens = max_summary_tokens
        self.estimator = estimator
        self._estimator_given = True

    @classmethod
    def from_config(
        cls,
        *,
        model: Model | str | None = None,
        prompt_template: str | None = None,
        max_summary_tokens: int = 500,
        estimator: TokenEstimator | None = None,
    ) -> LLMSummarizer:
        """A summarizer that asks a pydantic-ai model to fold evicted turns into the summary.

        Pass it as ``summarizer=`` to :class:`~memlane.ConversationMemory` or
        :class:`~memlane.MemoryManager`. Each call sends the previous summary and the evicted
        turns (tool calls and results included) to a throwaway agent on ``model``; the answer is
        cut to ``max_summary_tokens``. On any model failure (no key, network, provider error,
        empty answer) it logs a warning and returns a deterministic extractive summary instead.

        Args:
            model: A pydantic-ai model string or :class:`~pydantic_ai.models.Model`; defaults to
                :data:`DEFAULT_SUMMARY_MODEL`.
            prompt_template: The prompt, with ``{turns_text}`` where the previous summary and the
                turns go, and optionally ``{max_summary_tokens}``; defaults to
                :data:`DEFAULT_PROMPT_TEMPLATE`.
            max_summary_tokens: The most tokens a summary may have (counted by ``estimator``).
            estimator: Counts summary tokens; by default the estimator of the memory the
                summarizer is given to.

        Returns:
            The summarizer.

        Raises:
            ValueError: ``prompt_template`` lacks ``{turns_text}`` or has other placeholders, or
                ``max_summary_tokens`` is not positive.
            TypeError: ``max_summary_tokens`` is not an ``int``.
        """
        if isinstance(max_summary_tokens, bool) or not isinstance(max_summary_tokens, int):
            raise TypeError(
                f"max_summary_tokens must be int, not {type(max_summary_tokens).__name__}"
            )
        if max_summary_tokens <= 0:
            raise ValueError(f"max_summary_tokens must be > 0, got {max_summary_tokens!r}")
        template = DEFAULT_PROMPT_TEMPLATE if prompt_template is None else prompt_template
        if not isinstance(template, str):
            raise TypeError(f"prompt_template must be str, not {type(template).__name__}")
        if "{turns_text}" not in template:
            raise ValueError(
                "prompt_template must contain {turns_text}, where the turns to summarise go"
            )
        try:
            template.format(turns_text="", max_summary_tokens=max_summary_tokens)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                "prompt_template has a placeholder other than {turns_text} and "
                "{max_summary_tokens} "
                f"(double literal braces: {{{{ }}}}): {exc!r}"
            ) from exc
        summarizer = cls(
            model=DEFAULT_SUMMARY_MODEL if model is None else model,
            prompt_template=template,
            max_summary_tokens=max_summary_tokens,
            estimator=estimator if estimator is not None else TokenEstimator(),
        )
        summarizer._estimator_given = estimator is not None
        return summarizer

    def bind_estimator(self, estimator: TokenEstimator) -> None:
        """Adopts the memory's estimator unless one was passed to :meth:`from_config`.

        :class:`~memlane.ConversationMemory` calls this, so the summary is held to
        ``max_summary_tokens`` as the memory counts them.

        Args:
            estimator: The memory's estimator.
        """
        if not self._estimator_given:
            self.estimator = estimator

    def prompt(self, turns: Sequence[ConversationTurn]) -> str:
        """The text the model is sent for ``turns``.

        Args:
            turns: The previous summary (optional) and the evicted turns.

        Returns:
            The prompt.
        """
        return self.prompt_template.format(
            turns_text=format_turns(turns), max_summary_tokens=self.max_summary_tokens
        )

    def _agent(self) -> Agent[None, str]:
        # A fresh agent per summary: nothing of the conversation's agent (tools, instructions,
        # history) leaks into it, and a key set after start-up is picked up.
        from pydantic_ai import Agent

        return Agent(self.model, name="memlane-summarizer")

    def _finish(self, turns: Sequence[ConversationTurn], output: object) -> str:
        if not isinstance(output, str) or not output.strip():
            logger.warning(
                "memlane: the summary model returned no text; using an extractive summary"
            )
            return self.extractive_summary(turns)
        return fit_tokens(output.strip(), self.max_summary_tokens, self.estimator)

    def _fallback(self, turns: Sequence[ConversationTurn], exc: Exception) -> str:
        logger.warning(
            "memlane: LLM summary failed (%s: %s); using an extractive summary",
            type(exc).__name__,
            exc,
        )
        return self.extractive_summary(turns)

    def __call__(self, turns: list[ConversationTurn]) -> str:
        """The new summary of ``turns`` (the previous summary first, when there is one).

        Outside an event loop the model is run to completion. Inside one this cannot block,
        so it returns the extractive summary and logs a warning naming the async path
        (``await memory.async_add_turn(...)``, which awaits :meth:`async_summarize`).

        Args:
            turns: The previous summary (when there is one) and the evicted turns.

        Returns:
            The new summary, or the extractive one when the model fails or cannot be awaited.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            try:
                output = self._agent().run_sync(self.prompt(turns)).output
            except Exception as exc:  # noqa: BLE001  # any model failure falls back, by contract
                return self._fallback(turns, exc)
            return self._finish(turns, output)
        logger.warning(
            "memlane: summarizer called synchronously inside a running event loop; using an "
            "extractive summary (use await async_add_turn(...) for the LLM summary)"
        )
        return self.extractive_summary(turns)

    async def async_summarize(self, turns: list[ConversationTurn]) -> str:
        """Async :meth:`__call__`: the model is awaited on the running loop.

        Args:
            turns: The previous summary (when there is one) and the evicted turns.

        Returns:
            The new summary, or the extractive one when the model fails.
        """
        try:
            output = (await self._agent().run(self.prompt(turns))).output
        except Exception as exc:  # noqa: BLE001  # any model failure falls back, by contract
            return self._fallback(turns, exc)
        return self._finish(turns, output)

    def extractive_summary(self, turns: Sequence[ConversationTurn]) -> str:
        """The deterministic fallback: the previous summary plus one line per turn, cut to size.

        Each line holds the start of the turn's prompt and answer; :func:`fit_tokens` keeps the
        oldest and newest lines when the whole does not fit.

        Args:
            turns: The previous summary (when there is one) and the evicted turns.

        Returns:
            The summary, at most ``max_summary_tokens`` tokens.
        """
        lines: list[str] = []
        for turn in turns:
            if turn.metadata.get("summary"):
                lines.append(turn.assistant_response)
            else:
                lines.append(
                    f"- User: {_clip(turn.user_prompt, _EXTRACT_CHARS)} / "
                    f"Assistant: {_clip(turn.assistant_response, _EXTRACT_CHARS)}"
                )
        return fit_tokens("\n".join(lines), self.max_summary_tokens, self.estimator)


create_llm_summarizer = deprecated_alias(
    LLMSummarizer.from_config, "create_llm_summarizer", "LLMSummarizer.from_config"
)
"""Deprecated alias of :meth:`LLMSummarizer.from_config` (kept for one release)."""
