"""memlane.strategies: the models load the platform's JSON strictly; conditions are checked
when a strategy is built and evaluated safely."""

from __future__ import annotations

import doctest
import json
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_ai.messages import (
    ModelRequest,
    NativeToolCallPart,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.test import TestModel

from memlane import ConversationTurn, strategies
from memlane.strategies import (
    ConditionError,
    Interaction,
    KnowledgeBases,
    MemoryMaxTokensStrategy,
    NeuralyzerStrategy,
    Strategy,
    SummarizerStrategy,
    TextSplitterConfig,
    ToolResultClearing,
    compile_condition,
    interactions_from_turns,
    load_long_term,
    load_short_term,
    tool_outcomes,
)
from memlane.strategies.conditions import interaction_view, message_view
from memlane.strategies.interactions import group_interactions, part_role
from strategy_messages import AT, exchange

MAX_TOKENS_JSON = {
    "memory_strategy_id": "max_tokens",
    "memory_max_tokens": 8000,
    "conditions": ["message.role != 'tool'"],
}
SUMMARIZER_JSON = {
    "long_term_memory_id": "summarizer",
    "interaction_threshold_qty": 15,
    "interaction_threshold_tokens": 15000,
    "cod_max_loops": 3,
    "interaction_keep": 2,
    "instructions": "Focus on decisions made and action items.",
    "knowledge_base": {"collection_id": "session-memory", "search_mode": "always", "top_k": 3},
}


class TestPlatformJSON:
    """Both examples of the issue load, as text or as decoded objects."""

    @pytest.mark.parametrize("as_text", [True, False])
    def test_max_tokens_example(self, as_text: bool) -> None:
        strategy = Strategy.from_config(json.dumps(MAX_TOKENS_JSON) if as_text else MAX_TOKENS_JSON)
        assert strategy == MemoryMaxTokensStrategy(
            memory_max_tokens=8000, conditions=["message.role != 'tool'"]
        )

    @pytest.mark.parametrize("as_text", [True, False])
    def test_summarizer_example(self, as_text: bool) -> None:
        strategy = Strategy.from_config(json.dumps(SUMMARIZER_JSON) if as_text else SUMMARIZER_JSON)
        assert isinstance(strategy, SummarizerStrategy)
        assert strategy.interaction_threshold_qty == 15
        assert strategy.interaction_threshold_tokens == 15000
        assert strategy.cod_max_loops == 3
        assert strategy.interaction_keep == 2
        assert strategy.instructions == "Focus on decisions made and action items."
        assert strategy.knowledge_base == KnowledgeBases(
            collection_id="session-memory", search_mode="always", top_k=3
        )
        assert strategy.text_splitter == TextSplitterConfig()
        assert strategy.model is None

    def test_json_round_trips_without_the_model(self) -> None:
        strategy = SummarizerStrategy(**SUMMARIZER_JSON, model=TestModel())  # type: ignore[arg-type]
        dumped = json.loads(strategy.model_dump_json())
        assert "model" not in dumped
        assert Strategy.from_config(dumped) == SummarizerStrategy.model_validate(SUMMARIZER_JSON)

    def test_defaults(self) -> None:
        assert MemoryMaxTokensStrategy() == MemoryMaxTokensStrategy(
            memory_max_tokens=10000, conditions=[]
        )
        summarizer = SummarizerStrategy()
        assert (summarizer.interaction_threshold_qty, summarizer.interaction_threshold_tokens) == (
            20,
            20000,
        )
        assert (summarizer.cod_max_loops, summarizer.interaction_keep) == (5, 0)
        assert summarizer.knowledge_base is None
        assert summarizer.instructions is None
        neuralyzer = NeuralyzerStrategy()
        assert (neuralyzer.interaction_threshold_qty, neuralyzer.interaction_threshold_tokens) == (
            -1,
            -1,
        )
        assert neuralyzer.input_tokens_threshold == 0
        assert neuralyzer.on_tools_success_threshold == []
        assert ToolResultClearing().keep_last == 3
        splitter = TextSplitterConfig()
        assert 0 < splitter.chunk_overlap < splitter.chunk_size

    def test_load_short_term_takes_one_or_a_list(self) -> None:
        chain = load_short_term(
            '[{"memory_strategy_id": "tool_result_clearing", "keep_last": 2},'
            ' {"memory_strategy_id": "max_tokens", "memory_max_tokens": 500}]'
        )
        assert chain == [
            ToolResultClearing(keep_last=2),
            MemoryMaxTokensStrategy(memory_max_tokens=500),
        ]
        assert load_short_term(MAX_TOKENS_JSON) == [Strategy.from_config(MAX_TOKENS_JSON)]

    def test_load_long_term(self) -> None:
        assert load_long_term('{"long_term_memory_id": "neuralyzer"}') == NeuralyzerStrategy()

    def test_strategies_are_frozen(self) -> None:
        strategy = MemoryMaxTokensStrategy()
        with pytest.raises(ValidationError, match="frozen"):
            strategy.memory_max_tokens = 5


def _error(data: Any) -> str:
    with pytest.raises(ValueError) as info:  # noqa: PT011  # the message is checked by callers
        Strategy.from_config(data)
    return str(info.value)


class TestBadJSON:
    """Bad JSON is refused with a message naming the field and the offending value."""

    def test_unknown_long_term_id(self) -> None:
        message = _error({"long_term_memory_id": "amnesia"})
        assert "long_term_memory_id" in message
        assert "'amnesia'" in message

    def test_unknown_short_term_id(self) -> None:
        message = _error('{"memory_strategy_id": "fifo"}')
        assert "memory_strategy_id" in message
        assert "'fifo'" in message

    def test_unknown_field(self) -> None:
        message = _error({"memory_strategy_id": "max_tokens", "max_tokens": 8000})
        assert "max_tokens.max_tokens" in message
        assert "Extra inputs" in message
        assert "input_value=8000" in message

    def test_unknown_nested_field(self) -> None:
        data = {**SUMMARIZER_JSON, "knowledge_base": {"collection_id": "c", "topk": 3}}
        message = _error(data)
        assert "knowledge_base.topk" in message
        assert "input_value=3" in message

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("memory_max_tokens", "8000"),
            ("memory_max_tokens", 8000.5),
            ("memory_max_tokens", True),
            ("conditions", "message.role != 'tool'"),
        ],
    )
    def test_wrong_type(self, field: str, value: object) -> None:
        message = _error({"memory_strategy_id": "max_tokens", field: value})
        assert field in message
        assert f"input_value={value!r}" in message

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("memory_max_tokens", -2),
            ("cod_max_loops", 0),
            ("interaction_keep", -1),
            ("top_k", 0),
        ],
    )
    def test_out_of_range(self, field: str, value: int) -> None:
        if field == "memory_max_tokens":
            data: dict[str, Any] = {"memory_strategy_id": "max_tokens", field: value}
        elif field == "top_k":
            data = {"long_term_memory_id": "summarizer", "knowledge_base": {"collection_id": "c"}}
            data["knowledge_base"][field] = value
        else:
            data = {"long_term_memory_id": "summarizer", field: value}
        message = _error(data)
        assert field in message
        assert f"input_value={value}" in message

    def test_neither_or_both_ids(self) -> None:
        assert "exactly one" in _error({"memory_max_tokens": 5})
        assert "exactly one" in _error(
            {"memory_strategy_id": "max_tokens", "long_term_memory_id": "summarizer"}
        )

    def test_not_json(self) -> None:
        assert "does not parse" in _error("{memory_strategy_id: max_tokens}")
        assert "JSON object" in _error("[1, 2]")

    def test_a_threshold_at_or_below_keep_would_fire_without_effect(self) -> None:
        message = _error(
            {
                "long_term_memory_id": "neuralyzer",
                "interaction_threshold_qty": 2,
                "interaction_keep": 2,
            }
        )
        assert "interaction_threshold_qty (2)" in message
        assert "interaction_keep (2)" in message

    def test_splitter_overlap_below_size(self) -> None:
        with pytest.raises(ValueError, match=r"chunk_overlap \(10\).*chunk_size \(10\)"):
            TextSplitterConfig(chunk_size=10, chunk_overlap=10)

    def test_validation_errors_are_value_errors(self) -> None:
        with pytest.raises(ValidationError):
            Strategy.from_config({"long_term_memory_id": "summarizer", "cod_max_loops": "3"})
        assert issubclass(ValidationError, ValueError)


class TestConditionsAreCheckedWhenBuilt:
    """A condition that does not parse, names something unknown or fails is refused, quoted."""

    @pytest.mark.parametrize(
        ("expression", "reason"),
        [
            ("message.role !=", "does not parse"),
            ("msg.role == 'user'", "unknown name 'msg'"),
            ("message.rol == 'user'", "unknown field message.rol"),
            ("message == 'user'", "use a field of message"),
            ("open('/etc/passwd')", "unknown name 'open'"),
            ("message.content.__class__", "cannot be evaluated"),
            ("message.content > 3", "cannot be evaluated"),
            ("message.content[0] == 'W'", "cannot be evaluated"),
            ("", "non-empty"),
            ("import os", "does not parse"),
        ],
    )
    def test_refused(self, expression: str, reason: str) -> None:
        with pytest.raises(ValidationError) as info:
            MemoryMaxTokensStrategy(conditions=["message.role != 'tool'", expression])
        message = str(info.value)
        assert "conditions" in message
        assert reason in message
        assert repr(expression) in message

    def test_interaction_conditions_see_only_the_interaction(self) -> None:
        with pytest.raises(ValidationError, match="unknown name 'message'"):
            SummarizerStrategy(interaction_conditions=["message.role == 'user'"])
        with pytest.raises(ValidationError, match=r"unknown field interaction\.role"):
            NeuralyzerStrategy(interaction_conditions=["interaction.role == 'user'"])
        SummarizerStrategy(
            interaction_conditions=[
                "interaction.tokens > 10 and 'search' in interaction.tool_names"
            ]
        )

    @pytest.mark.parametrize(
        "expression",
        [
            "message.role in ('user', 'assistant')",
            "message.tool_name not in ['get_weather']",
            "len(message.content) < 2000 or interaction.age < 2",
            "not message.content.startswith('DEBUG')",
            "interaction.index >= 0 and interaction.tokens >= 0",
            "'secret' not in message.content.lower()",
            "message.role != 'tool' or interaction.user_prompt.endswith('?')",
        ],
    )
    def test_accepted(self, expression: str) -> None:
        assert MemoryMaxTokensStrategy(conditions=[expression]).conditions == [expression]

    def test_compile_condition_raises_condition_error(self) -> None:
        with pytest.raises(ConditionError, match=r"'nope\(\)'"):
            compile_condition("nope()")
        assert issubclass(ConditionError, ValueError)

    def test_a_failure_at_run_time_names_the_expression_and_the_part(self) -> None:
        # Samples have no "calc" tool, so only a real part can reach int(...).
        condition = compile_condition("message.tool_name != 'calc' or int(message.content) > 0")
        view = interaction_view(Interaction([], 0, 0), 0, lambda messages: 0)
        part = ToolReturnPart(tool_name="calc", content="not a number", tool_call_id="x")
        with pytest.raises(ConditionError, match="not a number") as info:
            condition.holds(view, message_view(part))
        assert "int(message.content)" in str(info.value)


class TestWhatAConditionSees:
    """message.role, content and tool_name of every kind of part."""

    @pytest.mark.parametrize(
        ("part", "role", "content", "tool_name"),
        [
            (UserPromptPart(content="hi", timestamp=AT), "user", "hi", ""),
            (UserPromptPart(content=["a", "b"], timestamp=AT), "user", "a\nb", ""),
            (SystemPromptPart(content="be brief", timestamp=AT), "system", "be brief", ""),
            (TextPart(content="hello"), "assistant", "hello", ""),
            (ThinkingPart(content="hmm"), "assistant", "hmm", ""),
            (
                ToolCallPart(tool_name="f", args={"x": 1}, tool_call_id="c"),
                "tool",
                '{"x":1}',
                "f",
            ),
            (ToolReturnPart(tool_name="f", content="42", tool_call_id="c"), "tool", "42", "f"),
            (
                NativeToolCallPart(tool_name="web_search", args={"q": "x"}, tool_call_id="n"),
                "tool",
                '{"q":"x"}',
                "web_search",
            ),
            (
                RetryFeedbackPart(content="try again", retry=RetryInfo(cause="model_retry")),
                "tool",
                "try again",
                "",
            ),
        ],
    )
    def test_part(self, part: object, role: str, content: str, tool_name: str) -> None:
        view = message_view(part)
        assert (view.role, view.content, view.tool_name) == (role, content, tool_name)
        assert part_role(part) == role

    def test_interaction_view(self) -> None:
        messages = exchange(4, tools=2, tool_name="search")
        view = interaction_view(Interaction(messages, 4, 99), 1, lambda m: 0)
        assert (view.index, view.age, view.tokens) == (4, 1, 99)
        assert view.user_prompt == "question 4"
        assert view.tool_names == ("search",)


class TestInteractions:
    """Turns and flat histories become interactions; tool outcomes are read from a run."""

    def test_group_interactions_splits_at_user_prompts(self) -> None:
        history = exchange(0, system="be brief") + exchange(1, tools=0) + exchange(2)
        groups = group_interactions(history, lambda messages: len(messages))
        assert [g.index for g in groups] == [0, 1, 2]
        assert [g.tokens for g in groups] == [4, 2, 4]
        assert [m for g in groups for m in g.messages] == history

    def test_leading_messages_without_a_prompt_form_their_own_interaction(self) -> None:
        history = exchange(0)
        head = history[0]
        assert isinstance(head, ModelRequest)
        summary = ModelRequest(parts=[SystemPromptPart(content="summary", timestamp=AT)])
        groups = group_interactions([summary, *history])
        assert [len(g.messages) for g in groups] == [1, 4]

    def test_interactions_from_turns(self) -> None:
        turns = [
            ConversationTurn(
                turn_id=7, user_prompt="q", assistant_response="a", token_estimate=3, timestamp=AT
            ),
            ConversationTurn(
                turn_id=8,
                user_prompt="question 8",
                assistant_response="answer 8",
                raw_messages=exchange(8),
                token_estimate=40,
            ),
        ]
        first, second = interactions_from_turns(turns)
        assert (first.index, first.tokens, len(first.messages)) == (7, 3, 2)
        assert (second.index, second.tokens) == (8, 40)
        assert second.messages == exchange(8)

    def test_tool_outcomes(self) -> None:
        run = (
            exchange(0, tool_name="search")
            + exchange(1, tool_name="deploy", outcome="failed")
            + exchange(2, tool_name="lint", outcome="retried")
            + exchange(3, tool_name="ask", outcome="denied")
        )
        outcomes = tool_outcomes(run)
        assert outcomes.succeeded == {"search"}
        assert outcomes.failed == {"deploy", "lint"}


@pytest.mark.parametrize(
    "module",
    [strategies, strategies.models, strategies.short_term, strategies.splitter],
    ids=lambda m: m.__name__,
)
def test_docstring_examples_run(module: object) -> None:
    """The examples in the docstrings are executed."""
    failed, attempted = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)  # type: ignore[arg-type]
    assert attempted > 0
    assert failed == 0
