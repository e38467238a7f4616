"""Facts extracted from conversation turns by a model, merged into long-term memory.

:meth:`FactExtractor.from_config` makes a :class:`FactExtractor`, which asks a pydantic-ai model
(structured output: a list of facts, each a key, a value, a fact type and a confidence) for
the facts stated in some :class:`~memlane.types.ConversationTurn`\\ s, and merges them through
:meth:`~memlane.longterm.LongTermMemory.remember`: a fact found again is confirmed, a changed
one updated with its history kept, none duplicated.

What the model says is data, not trusted input. Its output's shape is pydantic-ai's to
enforce (a malformed answer goes back to the model to correct, as for any structured output);
its content is checked here, fact by fact: a fact with an empty key, an unknown
``fact_type`` or a confidence outside 0.0–1.0 is skipped with a warning on the ``memlane``
logger, and the others are kept. Where facts land is the caller's choice (the ``scope`` of
:meth:`FactExtractor.apply`), never the model's, so nothing a conversation says can write into
another user's scope.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, JsonValue

from memlane._deprecation import deprecated_alias
from memlane._runner import Call, Plan, run_async, run_sync
from memlane._validate import check_fraction, check_identifier, type_name
from memlane.longterm.fact_model import FactScope, FactType, RememberResult, render_value
from memlane.longterm.facts import check_scope
from memlane.longterm.long_term_memory import LongTermMemory
from memlane.longterm.value_checks import check_enum
from memlane.summarization import format_turns
from memlane.types import ConversationTurn

if TYPE_CHECKING:
    from pydantic_ai import Agent
    from pydantic_ai.models import Model
    from pydantic_ai.run import AgentRunResult

# pydantic-ai is imported by an extractor's creation and runs, not with this module.

__all__ = [
    "DEFAULT_EXTRACTION_INSTRUCTIONS",
    "ExtractedFact",
    "FactExtractor",
    "create_fact_extractor",
]

logger = logging.getLogger("memlane")

DEFAULT_EXTRACTION_INSTRUCTIONS = (
    "You read a conversation between a user and an assistant and list the facts it states "
    "that are worth remembering in later conversations: who the user is, what they prefer, "
    "what is true about their world, corrections they made. Give each fact a short snake_case "
    "key (e.g. user_timezone), its value, its fact_type and how confident you are that it is "
    "true (0.0 to 1.0). Use the same key for the same fact every time. List nothing that is "
    "only small talk, and answer with an empty list when there is nothing to remember."
)
"""What the model is told when ``FactExtractor.from_config`` is given no ``instructions``."""

_FACT_TYPES = ", ".join(member.value for member in FactType)


class _Candidate(BaseModel):
    """A fact the conversation states."""

    # No constraints on purpose: a value out of range is skipped here with a warning, while a
    # constraint would send the whole answer back to the model and could fail the run.
    key: str = Field(description="A short snake_case name for the fact, e.g. user_timezone.")
    value: JsonValue = Field(description="The fact's value, e.g. Australia/Adelaide.")
    fact_type: str | None = Field(default=None, description=f"One of: {_FACT_TYPES}.")
    confidence: float = Field(
        default=0.8, description="How sure you are that the fact is true, 0.0 to 1.0."
    )


class ExtractedFact(BaseModel):
    """A fact a model found in conversation turns, checked.

    Attributes:
        key: The fact's name.
        value: Its value (plain JSON).
        fact_type: What kind of knowledge it is.
        confidence: 0.0–1.0, as the model rated it.
    """

    key: str
    value: Any = None
    fact_type: FactType = FactType.WORLD_KNOWLEDGE
    confidence: float = Field(default=0.8, ge=0.0, le=1.0)

    def __str__(self) -> str:
        return f"{self.key} = {render_value(self.value)}"


class FactExtractor:
    """Asks a model for the facts in conversation turns and merges them into long-term memory.

    Made by :meth:`from_config`. :meth:`async_extract`/:meth:`extract` only ask;
    :meth:`async_apply`/:meth:`apply` ask and remember. Each pair runs one plan (the model's
    run and each ``remember`` are its operations), on the sync or the async runner. Each call builds its own agent, so no
    state is shared between calls and a provider key set after start-up is picked up. An
    error of the model (a provider failure, an answer it could not correct) is raised to the
    caller; nothing is remembered then.

    Attributes:
        model: The model asked.
        instructions: What it is told.
        min_confidence: Facts the model rates below this are dropped.
        fact_type: The type of a fact the model gives none for.
    """

    def __init__(
        self, model: Model | str, instructions: str, min_confidence: float, fact_type: FactType
    ) -> None:
        self.model = model
        self.instructions = instructions
        self.min_confidence = min_confidence
        self.fact_type = fact_type

    @classmethod
    def from_config(
        cls,
        model: Model | str,
        *,
        instructions: str | None = None,
        min_confidence: float = 0.5,
        fact_type: FactType | str = "world_knowledge",
    ) -> FactExtractor:
        """A :class:`FactExtractor` asking ``model``.

        Args:
            model: A pydantic-ai model string (``"openai:gpt-4o-mini"``) or
                :class:`~pydantic_ai.models.Model`; test offline with
                :class:`~pydantic_ai.models.function.FunctionModel`.
            instructions: What the model is told; :data:`DEFAULT_EXTRACTION_INSTRUCTIONS` by
                default. The expected answer's shape reaches the model as its output schema.
            min_confidence: Facts rated below this are dropped, 0.0–1.0.
            fact_type: The type of a fact the model gives none for.

        Returns:
            The extractor.

        Raises:
            TypeError: A setting of the wrong type.
            ValueError: ``min_confidence`` outside 0.0–1.0, an unknown ``fact_type``, or empty
                ``instructions``.

        Example:
            >>> extractor = FactExtractor.from_config("test", min_confidence=0.7)
            >>> extractor.min_confidence
            0.7
        """
        from pydantic_ai.models import Model

        if not isinstance(model, (Model, str)):
            raise TypeError(f"model must be a pydantic-ai Model or str, not {type_name(model)}")
        if instructions is None:
            instructions = DEFAULT_EXTRACTION_INSTRUCTIONS
        elif not isinstance(instructions, str):
            raise TypeError(f"instructions must be str, not {type_name(instructions)}")
        elif not instructions.strip():
            raise ValueError("instructions must not be empty")
        return cls(
            model,
            instructions,
            check_fraction(min_confidence, "min_confidence"),
            check_enum(fact_type, FactType, "fact_type"),
        )

    def _agent(self) -> Agent[None, list[_Candidate]]:
        from pydantic_ai import Agent

        return Agent(
            self.model,
            output_type=list[_Candidate],
            instructions=self.instructions,
            name="memlane-fact-extractor",
        )

    def _checked(self, candidates: Sequence[_Candidate]) -> list[ExtractedFact]:
        facts: list[ExtractedFact] = []
        for candidate in candidates:
            try:
                key = check_identifier(candidate.key, "key")
                kind = (
                    self.fact_type
                    if candidate.fact_type is None
                    else check_enum(candidate.fact_type, FactType, "fact_type")
                )
                confidence = check_fraction(candidate.confidence, "confidence")
            except (TypeError, ValueError) as exc:
                logger.warning(
                    "memlane: skipped a fact the model extracted (%s): %s", exc, candidate
                )
                continue
            if confidence < self.min_confidence:
                continue
            facts.append(
                ExtractedFact(key=key, value=candidate.value, fact_type=kind, confidence=confidence)
            )
        return facts

    def _extract_plan(self, turns: Sequence[ConversationTurn]) -> Plan[list[ExtractedFact]]:
        """The one definition of :meth:`extract` and :meth:`async_extract`."""
        checked = _check_turns(turns)
        if not checked:
            return []
        agent = self._agent()
        prompt = format_turns(checked)
        result: AgentRunResult[list[_Candidate]] = yield Call(
            lambda: agent.run_sync(prompt), lambda: agent.run(prompt)
        )
        return self._checked(result.output)

    def _apply_plan(
        self,
        long_term: LongTermMemory,
        turns: Sequence[ConversationTurn],
        scope: FactScope | str,
        scope_id: str | None,
    ) -> Plan[list[RememberResult]]:
        """The one definition of :meth:`apply` and :meth:`async_apply`."""
        where, where_id = _check_target(long_term, scope, scope_id)
        results: list[RememberResult] = []
        for fact in (yield from self._extract_plan(turns)):
            how: dict[str, Any] = {
                "scope": where,
                "scope_id": where_id,
                "fact_type": fact.fact_type,
                "confidence": fact.confidence,
            }
            remember = partial(long_term.remember, fact.key, fact.value, **how)
            async_remember = partial(long_term.async_remember, fact.key, fact.value, **how)
            results.append((yield Call(remember, async_remember)))
        return results

    async def async_extract(self, turns: Sequence[ConversationTurn]) -> list[ExtractedFact]:
        """The facts the model finds in ``turns``, checked, in the order it gave them.

        Args:
            turns: The turns, oldest first (a leading summary turn is read as the previous
                summary, as the summarizer reads it).

        Returns:
            The facts, without those skipped (see the module) or under ``min_confidence``;
            ``[]`` without asking the model when there are no turns.

        Raises:
            TypeError: ``turns`` holds something other than ``ConversationTurn``.
        """
        return await run_async(self._extract_plan(turns), None)

    def extract(self, turns: Sequence[ConversationTurn]) -> list[ExtractedFact]:
        """Sync :meth:`async_extract` (not from inside a running event loop).

        Args:
            turns: The turns, oldest first.

        Returns:
            The facts.
        """
        return run_sync(self._extract_plan(turns), None)

    async def async_apply(
        self,
        long_term: LongTermMemory,
        turns: Sequence[ConversationTurn],
        *,
        scope: FactScope | str = "global",
        scope_id: str | None = None,
    ) -> list[RememberResult]:
        """Extracts the facts of ``turns`` and remembers each in ``scope``.

        Each goes through :meth:`~memlane.longterm.LongTermMemory.async_remember` with its
        type and confidence: ``created``, ``confirmed`` (the same value again) or ``updated``
        (a changed value; the old one joins the history).

        Args:
            long_term: Where to remember.
            turns: The turns, oldest first.
            scope: The scope the facts go to.
            scope_id: Its id (e.g. the user's id for ``scope="user"``).

        Returns:
            What each ``remember`` did, in the order the model gave the facts.

        Raises:
            TypeError, ValueError: A bad ``long_term``, ``scope`` or ``scope_id``, raised
                before the model is asked.
        """
        return await run_async(self._apply_plan(long_term, turns, scope, scope_id), None)

    def apply(
        self,
        long_term: LongTermMemory,
        turns: Sequence[ConversationTurn],
        *,
        scope: FactScope | str = "global",
        scope_id: str | None = None,
    ) -> list[RememberResult]:
        """Sync :meth:`async_apply` (not from inside a running event loop).

        Args:
            long_term: Where to remember.
            turns: The turns, oldest first.
            scope: The scope the facts go to.
            scope_id: Its id.

        Returns:
            What each ``remember`` did.
        """
        return run_sync(self._apply_plan(long_term, turns, scope, scope_id), None)


create_fact_extractor = deprecated_alias(
    FactExtractor.from_config, "create_fact_extractor", "FactExtractor.from_config"
)
"""Deprecated alias of :meth:`FactExtractor.from_config` (kept for one release)."""


def _check_turns(turns: object) -> list[ConversationTurn]:
    if isinstance(turns, (str, bytes)) or not isinstance(turns, Sequence):
        raise TypeError(f"turns must be a sequence of ConversationTurn, not {type_name(turns)}")
    for turn in turns:
        if not isinstance(turn, ConversationTurn):
            raise TypeError(f"turns must hold ConversationTurn, not {type_name(turn)}")
    return list(turns)


def _check_target(
    long_term: object, scope: object, scope_id: object
) -> tuple[FactScope, str | None]:
    if not isinstance(long_term, LongTermMemory):
        raise TypeError(f"long_term must be LongTermMemory, not {type_name(long_term)}")
    return check_scope(scope, scope_id)
