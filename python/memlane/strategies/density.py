"""Chain-of-density summaries (Adams et al., 2023): a first summary, then loops that each add
the salient facts it misses without making it longer, so it gets denser, not longer.

Each loop asks for a structured :class:`DensityStep`, and takes plain text when the model
answers that way instead (many local and small models do): the text is the summary of that
loop. A loop costs one model call; a reply that is neither (an empty one) is a failure.

The loop is written once, as a plan (:mod:`memlane._runner`) whose model calls are
:class:`~memlane._runner.Call` operations: :func:`chain_of_density_summary` runs it with
blocking model calls and :func:`async_chain_of_density_summary` awaits them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from pydantic import BaseModel, Field
from pydantic_ai import Agent
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.models import Model

from memlane._runner import Call, Plan, run_async, run_sync
from memlane.strategies.interactions import Interaction, part_content, part_role
from memlane.summarization import fit_tokens
from memlane.tokens import TokenEstimator

__all__ = [
    "COD_INSTRUCTIONS",
    "DensityStep",
    "async_chain_of_density_summary",
    "chain_of_density_summary",
    "format_interactions",
]

logger = logging.getLogger("memlane")

COD_INSTRUCTIONS = """\
You keep the running summary of a conversation between a user and an AI assistant.
The summary must keep every fact, name, number, preference, decision and open question the
user may come back to, and drop greetings and filler. Write plain prose or short bullets.
Each summary you write replaces the previous one entirely."""
"""What the summarising agent is told on every call (the strategy's instructions follow)."""


class DensityStep(BaseModel):
    """One loop's answer.

    Attributes:
        missing_entities: The salient facts from the conversation that the summary lacked and
            this loop added; empty when none were missing.
        summary: The summary after this loop.
    """

    missing_entities: list[str] = Field(default_factory=list)
    summary: str


_CLIP_CHARS = 2000  # of one part: a long tool result says little more past this


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _CLIP_CHARS else text[: _CLIP_CHARS - 1].rstrip() + "…"


def format_interactions(interactions: Iterable[Interaction]) -> str:
    """Interactions as the text a summary is written from, one line per part.

    Each interaction opens with ``[interaction <index>]``; prompts, answers, tool calls and
    tool results follow, each clipped to 2000 characters.

    Args:
        interactions: The interactions, oldest first.

    Returns:
        The text.
    """
    lines: list[str] = []
    for interaction in interactions:
        lines.append(f"[interaction {interaction.index}]")
        for message in interaction.messages:
            for part in message.parts:
                role, content = part_role(part), _clip(part_content(part))
                kind = getattr(part, "part_kind", "")
                name = getattr(part, "tool_name", None)
                if role == "tool" and kind.endswith("call"):
                    lines.append(f"Tool call: {name}({content})")
                elif role == "tool" and name:
                    lines.append(f"Tool result ({name}): {content}")
                elif role == "tool":
                    lines.append(f"Retry: {content}")
                elif kind == "thinking" or not content:
                    continue
                else:
                    lines.append(f"{role.capitalize()}: {content}")
    return "\n".join(lines)


def _source(interactions_text: str, previous_summary: str | None) -> str:
    blocks = []
    if previous_summary:
        blocks.append(f"<previous_summary>\n{previous_summary}\n</previous_summary>")
    blocks.append(f"<conversation>\n{interactions_text}\n</conversation>")
    return "\n\n".join(blocks)


_TEXT_ANSWER = "(If you cannot fill missing_entities, answer with the summary alone.)"


def _first_prompt(source: str, max_summary_tokens: int | None) -> str:
    length = (
        f"Use at most {max_summary_tokens} tokens."
        if max_summary_tokens is not None
        else "Keep it short: a few sentences."
    )
    return (
        f"{source}\n\nWrite a first summary of the previous summary (if any) and the "
        f"conversation above. {length} Put the facts you included in missing_entities. "
        f"{_TEXT_ANSWER}"
    )


def _denser_prompt(source: str, summary: str, tokens: int) -> str:
    return (
        f"{source}\n\n<current_summary>\n{summary}\n</current_summary>\n\n"
        "Find 1-3 salient facts from the previous summary or the conversation that the "
        "current summary lacks and list them in missing_entities. Rewrite the summary to "
        "include them while keeping everything it already says: fuse, compress and remove "
        f"uninformative phrases to make room. It must not grow: at most {tokens} tokens. "
        "If nothing salient is missing, return an empty missing_entities and the current "
        f"summary unchanged. {_TEXT_ANSWER}"
    )


Answer = DensityStep | str
"""A loop's answer: the structured step, or the summary alone as text."""


def _ask(agent: Agent[None, Answer], prompt: str) -> Call:
    def running() -> Answer:
        try:
            return agent.run_sync(prompt).output
        except UnexpectedModelBehavior as exc:
            raise _unusable(exc) from exc

    async def awaiting() -> Answer:
        try:
            return (await agent.run(prompt)).output
        except UnexpectedModelBehavior as exc:
            raise _unusable(exc) from exc

    return Call(running, awaiting)


def _unusable(exc: UnexpectedModelBehavior) -> ValueError:
    # With no output retries, pydantic-ai reports an empty reply (or a step it cannot
    # validate) as "Exceeded maximum output retries (0)", which tells a user nothing.
    return ValueError(
        f"the summary model returned no summary (an empty text or an unusable step: {exc})"
    )


def _step(answer: Answer) -> tuple[str, bool]:
    """A loop's summary, and whether it may still miss facts: a text answer does not say, so
    the chain goes on while its loops change the summary."""
    if isinstance(answer, str):
        return answer.strip(), True
    return answer.summary.strip(), bool(answer.missing_entities)


def _density_plan(
    agent: Agent[None, Answer],
    interactions_text: str,
    previous_summary: str | None,
    max_loops: int,
    max_summary_tokens: int | None,
    estimator: TokenEstimator,
) -> Plan[str]:
    """The chain: each model call is a :class:`~memlane._runner.Call` the runner makes.

    Returns the summary: the last one that was not longer than the one before it. Stops
    early when a loop finds nothing missing, fails, or answers longer or empty; a failure of
    the first call is raised.
    """
    if max_loops < 1:
        raise ValueError(f"max_loops must be >= 1, got {max_loops!r}")
    source = _source(interactions_text, previous_summary)
    summary, _ = _step((yield _ask(agent, _first_prompt(source, max_summary_tokens))))
    if not summary:
        raise ValueError("the summary model returned no summary (an empty text)")
    if max_summary_tokens is not None:
        summary = fit_tokens(summary, max_summary_tokens, estimator)
    tokens = estimator.estimate(summary)
    for loop in range(2, max_loops + 1):
        try:
            denser, missing = _step((yield _ask(agent, _denser_prompt(source, summary, tokens))))
        except Exception as exc:  # noqa: BLE001  # a later loop's failure keeps the summary so far
            logger.warning(
                "memlane: chain-of-density loop %d failed (%s: %s); keeping the summary so far",
                loop,
                type(exc).__name__,
                exc,
            )
            break
        denser_tokens = estimator.estimate(denser)
        if not denser or denser_tokens > tokens:
            logger.info(
                "memlane: a chain-of-density loop answered %d tokens for a %d-token summary; "
                "keeping the previous one",
                denser_tokens,
                tokens,
            )
            break
        if denser == summary:
            break
        summary, tokens = denser, denser_tokens
        if not missing:
            break
    return summary


def _agent(
    model: Model | str, instructions: str | None, focus: str | None = None
) -> Agent[None, Answer]:
    # A fresh agent per summary: nothing of the conversation's agent (tools, instructions,
    # history) leaks into it.
    text = COD_INSTRUCTIONS if not instructions else f"{COD_INSTRUCTIONS}\n\n{instructions}"
    if focus:
        text = f"{text}\n\nFocus of this summary: {focus}"
    # Text is an answer too, and no output retries: a model that cannot fill the structure
    # costs one call per loop, not a retry per loop that fails the same way.
    return Agent(
        model,
        output_type=[DensityStep, str],
        instructions=text,
        name="memlane-chain-of-density",
        retries={"output": 0},
    )


def chain_of_density_summary(
    model: Model | str,
    interactions_text: str,
    previous_summary: str | None = None,
    *,
    max_loops: int = 5,
    instructions: str | None = None,
    max_summary_tokens: int | None = None,
    estimator: TokenEstimator | None = None,
    focus: str | None = None,
) -> str:
    """A chain-of-density summary of ``interactions_text`` (and the previous summary).

    The first call writes a summary; each further call, up to ``max_loops`` calls in all,
    adds the salient facts it misses without making it longer. The chain stops early when a
    loop finds nothing missing, answers longer than the summary it was given, or fails (the
    summary so far is kept). Blocks; in async code use
    :func:`async_chain_of_density_summary`.

    Args:
        model: The pydantic-ai model or model string.
        interactions_text: The interactions to summarise, as text.
        previous_summary: The summary they extend, folded into the new one.
        max_loops: The most model calls (``cod_max_loops``), at least 1.
        instructions: Extra guidance (the strategy's ``instructions``).
        max_summary_tokens: The longest the first summary may be (cut to it if longer);
            ``None``: no limit beyond the model's own.
        estimator: Counts summary tokens (default: an exact :class:`~memlane.TokenEstimator`).
        focus: A line saying what the summary must keep above all ("the decisions about
            invoices"), added to the instructions.

    Returns:
        The summary.

    Raises:
        ValueError: ``max_loops`` < 1, or the first call returned no summary.
        Exception: Whatever the first model call raised.
    """
    plan = _density_plan(
        _agent(model, instructions, focus),
        interactions_text,
        previous_summary,
        max_loops,
        max_summary_tokens,
        estimator if estimator is not None else TokenEstimator(),
    )
    return run_sync(plan, None)


async def async_chain_of_density_summary(
    model: Model | str,
    interactions_text: str,
    previous_summary: str | None = None,
    *,
    max_loops: int = 5,
    instructions: str | None = None,
    max_summary_tokens: int | None = None,
    estimator: TokenEstimator | None = None,
    focus: str | None = None,
) -> str:
    """Async :func:`chain_of_density_summary`: each model call is awaited on the running loop.

    Args and return as for :func:`chain_of_density_summary`.
    """
    plan = _density_plan(
        _agent(model, instructions, focus),
        interactions_text,
        previous_summary,
        max_loops,
        max_summary_tokens,
        estimator if estimator is not None else TokenEstimator(),
    )
    return await run_async(plan, None)
