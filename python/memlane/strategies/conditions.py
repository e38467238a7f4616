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
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import simpleeval
from pydantic_ai.messages import BaseToolCallPart, UserPromptPart
from simpleeval import EvalWithCompoundTypes

from memlane.errors import ConditionError
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


def message_view(part: object, reads: frozenset[str] | None = None) -> MessageView:
    """The ``message`` a condition sees for a part of a pydantic-ai message.

    Args:
        part: The part.
        reads: The fields the conditions read (:attr:`CompiledCondition.reads`); the
            content, which may mean serialising a tool's arguments or result, is left ``""``
            when none reads it. ``None``: every field.

    Returns:
        The view.
    """
    content = part_content(part) if reads is None or "message.content" in reads else ""
    return MessageView(part_role(part), content, part_tool_name(part))


def interaction_view(
    interaction: Interaction,
    age: int,
    count_tokens: CountTokens,
    reads: frozenset[str] | None = None,
) -> InteractionView:
    """The ``interaction`` a condition sees.

    Args:
        interaction: The interaction.
        age: How many interactions are newer (0 for the newest).
        count_tokens: Counts its tokens when they are not known.
        reads: The fields the conditions read; those that take work to find (tokens, the
            prompt, the tools) are left empty when none reads them. ``None``: every field.

    Returns:
        The view.
    """
    wanted = frozenset(f"interaction.{f}" for f in INTERACTION_FIELDS) if reads is None else reads
    tokens = interaction.token_count(count_tokens) if "interaction.tokens" in wanted else 0
    prompts: list[str] = []
    tools: dict[str, None] = {}
    if "interaction.user_prompt" in wanted or "interaction.tool_names" in wanted:
        for message in interaction.messages:
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    prompts.append(part_content(part))
                elif isinstance(part, BaseToolCallPart):
                    tools[part.tool_name] = None
    return InteractionView(interaction.index, age, tokens, "\n".join(prompts), tuple(tools))


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


def _check_names(expression: str, tree: ast.AST, scope: Scope) -> frozenset[str]:
    """Every name is a known object used for a known field, or an allowed function.

    Returns the fields read (``"message.role"``...): the only values the expression can see,
    since ``message`` and ``interaction`` appear only as the base of a field.
    """
    allowed = _allowed(scope)
    read_fields: set[int] = set()  # ids of Name nodes that are the base of a field read
    reads: set[str] = set()
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
            reads.add(f"{node.value.id}.{node.attr}")
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
    return frozenset(reads)


_local = threading.local()


def _evaluator() -> EvalWithCompoundTypes:
    """This thread's evaluator (it holds the names of the evaluation in progress)."""
    evaluator: EvalWithCompoundTypes | None = getattr(_local, "evaluator", None)
    if evaluator is None:
        evaluator = EvalWithCompoundTypes(functions=dict(_FUNCTIONS), names={})
        _local.evaluator = evaluator
    return evaluator


_Value = Callable[[Any, Any], Any]
"""A part of an expression as a function of ``(interaction, message)``."""


def _fast_all(nodes: list[ast.expr]) -> list[_Value] | None:
    values = [_fast(node) for node in nodes]
    return [v for v in values if v is not None] if all(values) else None


def _fast(node: ast.AST) -> _Value | None:
    """``node`` as nested functions doing what simpleeval does for it, or ``None`` when it
    holds something they do not cover (string methods, subscripts, keywords...).

    simpleeval walks the tree again at every evaluation; a condition on each new part's
    content (``len(message.content) < 2000``) is evaluated on every turn. The functions
    call the operators and functions simpleeval calls, in its order, so the value is the
    same; when they raise, simpleeval evaluates the expression and reports the error.
    """
    operators: dict[type, Callable[..., Any]] = simpleeval.DEFAULT_OPERATORS
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, str | bytes) and len(value) > simpleeval.MAX_STRING_LENGTH:
            return None  # simpleeval refuses it
        return lambda i, m: value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        name = node.attr
        if node.value.id == "message":
            return lambda i, m: getattr(m, name)
        if node.value.id == "interaction":
            return lambda i, m: getattr(i, name)
        return None
    if isinstance(node, ast.Tuple | ast.List):
        items = _fast_all(node.elts)
        if items is None:
            return None
        kind = tuple if isinstance(node, ast.Tuple) else list
        return lambda i, m: kind(f(i, m) for f in items)
    if isinstance(node, ast.Call):
        func = _FUNCTIONS.get(node.func.id) if isinstance(node.func, ast.Name) else None
        args = _fast_all(node.args)
        if func is None or node.keywords or args is None:
            return None
        if len(args) == 1:
            arg = args[0]
            return lambda i, m: func(arg(i, m))
        return lambda i, m: func(*(a(i, m) for a in args))
    if isinstance(node, ast.Compare):
        left = _fast(node.left)
        rights = _fast_all(node.comparators)
        ops = [operators.get(type(op)) for op in node.ops]
        if left is None or rights is None or not all(ops):
            return None
        pairs = [(op, right) for op, right in zip(ops, rights, strict=True) if op is not None]
        if len(pairs) == 1:
            op, right = pairs[0]
            return lambda i, m: op(left(i, m), right(i, m))

        def chain(i: Any, m: Any) -> Any:
            value = left(i, m)
            result: Any = True
            for op, right in pairs:  # as simpleeval: the last comparison's value
                if not result:
                    break
                value, before = right(i, m), value
                result = op(before, value)
            return result

        return chain
    if isinstance(node, ast.BoolOp):
        values = _fast_all(node.values)
        if values is None:
            return None
        is_and = isinstance(node.op, ast.And)

        def boolean(i: Any, m: Any) -> Any:
            result: Any = False
            for value in values:
                result = value(i, m)
                if bool(result) != is_and:
                    break
            return result

        return boolean
    if isinstance(node, ast.UnaryOp | ast.BinOp):
        operator = operators.get(type(node.op))
        if operator is None:
            return None
        if isinstance(node, ast.UnaryOp):
            operand = _fast(node.operand)
            return None if operand is None else (lambda i, m: operator(operand(i, m)))
        first, second = _fast(node.left), _fast(node.right)
        if first is None or second is None:
            return None
        return lambda i, m: operator(first(i, m), second(i, m))
    return None


_RESULTS_MAX = 4096  # results a condition remembers; the memory is emptied when full
_KEY_CHARS_MAX = 1024  # a longer value is evaluated every time rather than kept alive


@dataclass(frozen=True, slots=True)
class CompiledCondition:
    """A checked condition, parsed once and evaluated many times.

    The expression is pure (no function it may call has effects or reads state), so its value
    depends only on the fields it reads: results are remembered by those values, and
    ``"message.role != 'tool'"`` is evaluated once per role, not once per part and turn.

    Attributes:
        expression: The source text.
        scope: ``"message"`` or ``"interaction"``.
        reads: The fields it reads, e.g. ``frozenset({"message.role"})``.
    """

    expression: str
    scope: Scope
    reads: frozenset[str]
    _node: ast.AST = field(repr=False, compare=False)
    _fields: tuple[tuple[bool, str], ...] = field(repr=False, compare=False)
    _fast: _Value | None = field(default=None, repr=False, compare=False)
    _results: dict[tuple[object, ...], bool] = field(
        default_factory=dict, repr=False, compare=False
    )

    def holds(self, interaction: InteractionView, message: MessageView | None = None) -> bool:
        """Whether the condition is true for ``message`` in ``interaction``.

        Args:
            interaction: The interaction.
            message: The part (message conditions only).

        Returns:
            The truth of the expression's value.

        Raises:
            ConditionError: The expression fails on these values (it names them).
        """
        key = tuple([getattr(message if m else interaction, name) for m, name in self._fields])
        known = self._results.get(key)
        if known is not None:
            return known
        result = None
        if self._fast is not None:
            try:
                result = bool(self._fast(interaction, message))
            except Exception:  # noqa: BLE001 - simpleeval, below, says what went wrong
                result = None
        if result is None:
            result = self._evaluate(interaction, message)
        for value in key:
            if isinstance(value, str) and len(value) > _KEY_CHARS_MAX:
                return result
        if len(self._results) >= _RESULTS_MAX:
            self._results.clear()
        self._results[key] = result
        return result

    def _evaluate(self, interaction: InteractionView, message: MessageView | None) -> bool:
        names: dict[str, object] = {"interaction": interaction}
        if message is not None:
            names["message"] = message
        evaluator = _evaluator()
        evaluator.names = names
        try:
            result = bool(evaluator.eval(self.expression, previously_parsed=self._node))
        except Exception as exc:
            subject = message if message is not None else interaction
            raise ConditionError(
                f"condition {self.expression!r} failed on {subject!r}: {type(exc).__name__}: {exc}"
            ) from exc
        return result


@functools.lru_cache(maxsize=512)
def compile_condition(expression: str, scope: Scope = "message") -> CompiledCondition:
    """A condition parsed and checked: known names only, and it evaluates on sample parts.

    Args:
        expression: The expression, e.g. ``"message.role != 'tool'"``.
        scope: ``"message"`` for a message condition, ``"interaction"`` for an interaction
            condition.

    Returns:
        The compiled condition (the same object for the same arguments).

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
    reads = _check_names(expression, tree, scope)
    fields = tuple(
        (of == "message", name) for of, _, name in (read.partition(".") for read in sorted(reads))
    )
    condition = CompiledCondition(expression, scope, reads, tree.body, fields, _fast(tree.body))
    for interaction in _SAMPLE_INTERACTIONS:
        for message in _SAMPLE_MESSAGES if scope == "message" else (None,):
            try:
                condition.holds(interaction, message)
            except ConditionError as exc:
                raise ConditionError(
                    f"condition {expression!r} cannot be evaluated: {exc.__cause__}"
                ) from exc
    return condition
