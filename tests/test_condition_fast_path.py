"""Conditions of common shapes run as nested functions rather than through simpleeval's tree
walk: the same truth on every view, and the same error when the expression fails."""

from __future__ import annotations

import itertools

import pytest

from memlane.strategies.conditions import (
    CompiledCondition,
    ConditionError,
    InteractionView,
    MessageView,
    compile_condition,
)

MESSAGES = [
    MessageView("user", "What is the weather in Paris?", ""),
    MessageView("assistant", "x" * 2500, ""),
    MessageView("tool", '{"city": "Paris"}', "get_weather"),
    MessageView("tool", "", "search"),
    MessageView("system", "You are a helpful assistant.", ""),
]
INTERACTIONS = [
    InteractionView(0, 0, 0, "", ()),
    InteractionView(7, 3, 1200, "What is the weather?", ("get_weather", "search")),
]
EXPRESSIONS = [
    "message.role != 'tool'",
    "len(message.content) < 2000",
    "message.role == 'tool' and len(message.content) > 10",
    "message.role in ('user', 'assistant') or message.tool_name == 'search'",
    "message.role not in ['tool']",
    "not message.tool_name",
    "0 < len(message.content) <= 30",
    "1 < interaction.index < 5 < interaction.tokens",
    "interaction.index % 3 != 1",
    "interaction.tokens * 2 - 1 > 1000",
    "-interaction.age < -1",
    "'search' in interaction.tool_names",
    "len(interaction.tool_names) >= 2 and interaction.user_prompt != ''",
    "max(interaction.index, 3) == 3",
    "min(len(message.content), 10) + abs(-1) == 11",
    "str(interaction.index) + 'x' == '7x'",
    "int(len(message.content) / 100) > 3",
    "float(interaction.tokens) / 2 > 1.5",
    "any([message.role == 'tool', interaction.index > 5])",
    "all((message.content, message.role))",
    "message.content.startswith('What')",  # a string method: simpleeval's own walk
    "message.content[:1] == 'W'",
    "message.role == 'user' and True or None",
]
# Expressions that pass the checks on the samples and may fail on other values.
FAILING = [
    "interaction.index / (interaction.tokens - 1200) > 0",
    "1 / (len(message.content) - 2500) < 1",
    "interaction.tokens // (interaction.index - 7) > 0",
]


def fresh(expression: str) -> tuple[CompiledCondition, CompiledCondition]:
    """The condition, and a twin of it without the fast path, neither remembering results."""
    compiled = compile_condition(expression, "message")
    fast = CompiledCondition(
        expression, "message", compiled.reads, compiled._node, compiled._fields, compiled._fast
    )
    slow = CompiledCondition(
        expression, "message", compiled.reads, compiled._node, compiled._fields
    )
    return fast, slow


def outcome(condition: CompiledCondition, i: InteractionView, m: MessageView) -> object:
    try:
        return condition.holds(i, m)
    except ConditionError as exc:
        return str(exc)


@pytest.mark.parametrize("expression", EXPRESSIONS + FAILING)
def test_same_truth_and_errors(expression: str) -> None:
    try:
        fast, slow = fresh(expression)
    except ConditionError:
        pytest.skip("fails on the samples: refused when a strategy is built")
    for i, m in itertools.product(INTERACTIONS, MESSAGES):
        assert outcome(fast, i, m) == outcome(slow, i, m)


def test_common_shapes_take_the_fast_path() -> None:
    for expression in EXPRESSIONS[:-3]:
        assert compile_condition(expression, "message")._fast is not None, expression
    assert compile_condition("message.content.startswith('What')", "message")._fast is None


def test_a_failure_names_the_expression() -> None:
    fast, _ = fresh("interaction.index / (interaction.tokens - 1200) > 0")
    with pytest.raises(ConditionError, match="ZeroDivisionError"):
        fast.holds(INTERACTIONS[1], MESSAGES[0])
