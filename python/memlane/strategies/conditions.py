"""Conditions: small expressions, evaluated with ``simpleeval`` (never ``eval``), that say
which message parts enter the prompt and which interactions count toward a trigger.

A message condition (``MemoryMaxTokensStrategy.conditions``) sees two names:

* ``message.role`` (``"user"``, ``"assistant"``, ``"tool"`` or ``"system"``, see
  :func:`~memlane.strategies.interactions.part_role`), ``message.content`` (the part's text)
  and ``message.tool_name`` (``""`` for parts that belong to no tool);
* ``interaction.index`` (its 0-based position in the conversation), ``interaction.age``
  (0 for the newest interaction, 1 for the one before), ``interaction.tokens`` (what the whole
  interaction costs), ``interaction.user_prompt`` (its prompt's text) and
  ``interaction.tool_names`` (a tuple of the tools it called).

An interaction condition (``interaction_conditions`` of the long-term strategies) sees only
``interaction``. Besides these, an expression may use literals (lists and tuples too),
comparisons, ``and``/``or``/``not``, ``in``, arithmetic, string methods and the functions
``len``, ``str``, ``int``, ``float``, ``abs``, ``min``, ``max``, ``any`` and ``all``.

An expression is checked when a strategy is built: it must parse, name only the names above,
and evaluate without error against a sample part of every role.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai.messages import BaseToolCallPart, UserPromptPart
from simpleeval import EvalWithCompoundTypes

from memlane.strategies.interactions import (
    CountTokens,
    Interaction,
    Role,
    part_content,
    part_role,
    part_tool_name,
)

__all__ = [
    "INTERACTION_FIELDS",
    "MESSAGE_FIELDS",
    "CompiledCondition",
    "ConditionError",
    "InteractionView",
    "MessageView",
    "Scope",
    "compile_condition",
    "interaction_view",
    "message_view",
]

Scope = Literal["message", "interaction"]
"""Which names a condition may use: a message condition's or an interaction condition's."""

MESSAGE_FIELDS = ("role", "content", "tool_name")
"""What a condition may read of ``message``."""

INTERACTION_FIELDS = ("index", "age", "tokens", "user_prompt", "tool_names")
"""What a condition may read of ``interaction``."""

_FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    "len": len,
    "str": str,
    "int": int,
    "float": float,
    "abs": abs,
    "min": min,
    "max": max,
    "any": any,
    "all": all,
}


class ConditionError(ValueError):
    """A condition that does not parse, names something unknown, or fails to evaluate.

    The message quotes the expression.
    """


@dataclass(frozen=True, slots=True)
class MessageView:
    """What a condition reads as ``message``: one part of a pydantic-ai message."""

    role: Role
    content: str
    tool_name: str


@dataclass(frozen=True, slots=True)
class InteractionView:
    """What a condition reads as ``interaction``."""

    index: int
    age: int
    tokens: int
    user_prompt: str
    tool_names: tuple[str, ...]


def message_view(part: object) -> MessageView:
    """The ``message`` a condition sees for a part of a pydantic-ai message."""
    return MessageView(part_role(part), part_content(part), part_tool_name(part))


_SAMPLE_MESSAGES = (
    MessageView("user", "What is the weather in Paris?", ""),
    MessageView("assistant", "It is sunny in Paris.", ""),
    MessageView("tool", '{"city": "Paris"}', "get_weather"),
    MessageView("tool", "sunny, 21 C", "get_weather"),
    MessageView("system", "You are a helpful assistant.", ""),
    MessageView("assistant", "", ""),
)
_SAMPLE_INTERACTIONS = (
    InteractionView(3, 1, 120, "What is the weather in Paris?", ("get_weather",)),
    InteractionView(0, 0, 0, "", ()),
)


def _allowed(scope: Scope) -> dict[str, tuple[str, ...]]:
    if scope == "message":
        return {"message": MESSAGE_FIELDS, "interaction": INTERACTION_FIELDS}
    return {"interaction": INTERACTION_FIELDS}


def _check_names(expression: str, tree: ast.AST, scope: Scope) -> None:
    """Every name is a known object used for a known field, or an allowed function."""
    allowed = _allowed(scope)
    read_fields: set[int] = set()  # ids of Name nodes that are the base of a field read
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            fields = allowed.get(node.value.id)
            if fields is None:
                continue  # reported below, as an unknown name
            if node.attr not in fields:
                known = ", ".join(f"{node.value.id}.{f}" for f in fields)
                raise ConditionError(
                    f"condition {expression!r}: unknown field {node.value.id}.{node.attr} "
                    f"(known: {known})"
                )
            read_fields.add(id(node.value))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name):
            continue
        if node.id in allowed:
            if id(node) not in read_fields:
                raise ConditionError(
                    f"condition {expression!r}: use a field of {node.id} "
                    f"(one of {', '.join(allowed[node.id])}), not {node.id} itself"
                )
        elif node.id not in _FUNCTIONS and node.id not in ("True", "False", "None"):
            names = ", ".join([*allowed, *_FUNCTIONS])
            raise ConditionError(
                f"condition {expression!r}: unknown name {node.id!r} (known: {names})"
            )


@dataclass(frozen=True, slots=True)
class CompiledCondition:
    """A checked condition, parsed once and evaluated many times.

    Attributes:
        expression: The source text.
        scope: ``"message"`` or ``"interaction"``.
    """

    expression: str
    scope: Scope
    _node: ast.AST

    def evaluator(self) -> EvalWithCompoundTypes:
        """A fresh evaluator (not shared between threads: it holds the names it is given)."""
        return EvalWithCompoundTypes(functions=dict(_FUNCTIONS), names={})

    def holds(
        self,
        evaluator: EvalWithCompoundTypes,
        interaction: InteractionView,
        message: MessageView | None = None,
    ) -> bool:
        """Whether the condition is true for ``message`` in ``interaction``.

        Args:
            evaluator: From :meth:`evaluator`, reused across calls.
            interaction: The interaction.
            message: The part (message conditions only).

        Returns:
            The truth of the expression's value.

        Raises:
            ConditionError: The expression fails on these values (it names them).
        """
        names: dict[str, object] = {"interaction": interaction}
        if message is not None:
            names["message"] = message
        evaluator.names = names
        try:
            return bool(evaluator.eval(self.expression, previously_parsed=self._node))
        except Exception as exc:
            subject = message if message is not None else interaction
            raise ConditionError(
                f"condition {self.expression!r} failed on {subject!r}: {type(exc).__name__}: {exc}"
            ) from exc


@functools.lru_cache(maxsize=512)
def compile_condition(expression: str, scope: Scope = "message") -> CompiledCondition:
    """A condition parsed and checked: known names only, and it evaluates on sample parts.

    Args:
        expression: The expression, e.g. ``"message.role != 'tool'"``.
        scope: ``"message"`` for a message condition, ``"interaction"`` for an interaction
            condition.

    Returns:
        The compiled condition.

    Raises:
        ConditionError: It does not parse, names something unknown, or fails on a sample
            (the message quotes the expression).
    """
    if not isinstance(expression, str) or not expression.strip():
        raise ConditionError(f"condition {expression!r}: must be a non-empty expression")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ConditionError(f"condition {expression!r} does not parse: {exc.msg}") from exc
    _check_names(expression, tree, scope)
    condition = CompiledCondition(expression, scope, tree.body)
    evaluator = condition.evaluator()
    for interaction in _SAMPLE_INTERACTIONS:
        for message in _SAMPLE_MESSAGES if scope == "message" else (None,):
            try:
                condition.holds(evaluator, interaction, message)
            except ConditionError as exc:
                raise ConditionError(
                    f"condition {expression!r} cannot be evaluated: {exc.__cause__}"
                ) from exc
    return condition


def interaction_view(
    interaction: Interaction, age: int, count_tokens: CountTokens
) -> InteractionView:
    """The ``interaction`` a condition sees.

    Args:
        interaction: The interaction.
        age: How many interactions are newer (0 for the newest).
        count_tokens: Counts its tokens when they are not known.

    Returns:
        The view.
    """
    prompts: list[str] = []
    tools: dict[str, None] = {}
    for message in interaction.messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                prompts.append(part_content(part))
            elif isinstance(part, BaseToolCallPart):
                tools[part.tool_name] = None
    return InteractionView(
        interaction.index,
        age,
        interaction.token_count(count_tokens),
        "\n".join(prompts),
        tuple(tools),
    )
