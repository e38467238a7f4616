"""memlane.strategies long-term: when the summarizer and the neuralyzer fire and what they
keep, chain-of-density summaries on pydantic-ai's offline FunctionModel, and the splitter."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import ModelHTTPError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memlane import TokenEstimator, _backend
from memlane.strategies import (
    Interaction,
    NeuralyzerStrategy,
    SummarizerStrategy,
    TextSplitterConfig,
    ToolOutcomes,
    async_chain_of_density_summary,
    chain_of_density_summary,
    format_interactions,
    message_token_counter,
    plan_long_term,
    split_text,
    trigger_reasons,
)
from strategy_messages import exchange, interaction


def _sized(n: int, tokens: int = 10) -> list[Interaction]:
    """``n`` interactions whose tokens are already known."""
    return [Interaction(exchange(i), i, tokens) for i in range(n)]


class TestQuantityAndTokenTriggers:
    """interaction_threshold_qty and _tokens fire when reached; 0 disables, -1 never fires."""

    def test_qty_fires_when_reached(self) -> None:
        strategy = SummarizerStrategy(interaction_threshold_qty=3, interaction_threshold_tokens=0)
        assert trigger_reasons(strategy, _sized(2)) == ()
        assert trigger_reasons(strategy, _sized(3)) == ("interaction_threshold_qty: 3 >= 3",)

    def test_tokens_fire_when_reached(self) -> None:
        strategy = SummarizerStrategy(interaction_threshold_qty=0, interaction_threshold_tokens=50)
        assert trigger_reasons(strategy, _sized(4, tokens=12)) == ()
        assert trigger_reasons(strategy, _sized(5, tokens=10)) == (
            "interaction_threshold_tokens: 50 >= 50",
        )

    def test_tokens_are_counted_when_unknown(self, impl: _backend.Implementation) -> None:
        count = message_token_counter()
        interactions = [interaction(i) for i in range(3)]
        total = sum(count(i.messages) for i in interactions)
        at = SummarizerStrategy(interaction_threshold_qty=0, interaction_threshold_tokens=total)
        above = SummarizerStrategy(
            interaction_threshold_qty=0, interaction_threshold_tokens=total + 1
        )
        assert trigger_reasons(at, interactions) == (
            f"interaction_threshold_tokens: {total} >= {total}",
        )
        assert trigger_reasons(above, interactions) == ()

    @pytest.mark.parametrize("off", [0, -1])
    def test_zero_and_minus_one_never_fire(self, off: int) -> None:
        strategy = SummarizerStrategy(
            interaction_threshold_qty=off, interaction_threshold_tokens=off
        )
        assert trigger_reasons(strategy, _sized(1000, tokens=1000)) == ()

    def test_neuralyzer_never_fires_by_default(self) -> None:
        strategy = NeuralyzerStrategy()
        assert (
            trigger_reasons(
                strategy,
                _sized(1000, tokens=1000),
                input_tokens=10**6,
                tool_outcomes=ToolOutcomes(frozenset({"t"}), frozenset({"t"})),
            )
            == ()
        )

    def test_interaction_conditions_choose_what_counts(self) -> None:
        interactions = [
            Interaction(exchange(i, tool_name="search" if i % 2 else "get_weather"), i, 10)
            for i in range(6)
        ]
        strategy = SummarizerStrategy(
            interaction_threshold_qty=3,
            interaction_threshold_tokens=30,
            interaction_conditions=["'search' in interaction.tool_names"],
        )
        assert trigger_reasons(strategy, interactions[:5]) == ()
        assert trigger_reasons(strategy, interactions) == (
            "interaction_threshold_qty: 3 >= 3",
            "interaction_threshold_tokens: 30 >= 30",
        )
        recent = SummarizerStrategy(
            interaction_threshold_qty=2, interaction_conditions=["interaction.age >= 4"]
        )
        assert trigger_reasons(recent, interactions) == ("interaction_threshold_qty: 2 >= 2",)


class TestRunTriggers:
    """input_tokens_threshold and the tool lists fire on what the last run reported."""

    def test_input_tokens_must_exceed(self) -> None:
        strategy = NeuralyzerStrategy(input_tokens_threshold=1000)
        assert trigger_reasons(strategy, _sized(3), input_tokens=1000) == ()
        assert trigger_reasons(strategy, _sized(3)) == ()
        assert trigger_reasons(strategy, _sized(3), input_tokens=1001) == (
            "input_tokens_threshold: 1001 > 1000",
        )

    @pytest.mark.parametrize("off", [0, -1])
    def test_input_tokens_zero_and_minus_one_never_fire(self, off: int) -> None:
        strategy = NeuralyzerStrategy(input_tokens_threshold=off)
        assert trigger_reasons(strategy, _sized(3), input_tokens=10**9) == ()

    def test_tool_success_and_error_lists(self) -> None:
        strategy = NeuralyzerStrategy(
            on_tools_success_threshold=["checkout", "reset"], on_tools_error_threshold=["deploy"]
        )
        ran = ToolOutcomes(succeeded=frozenset({"search", "reset"}), failed=frozenset({"lint"}))
        assert trigger_reasons(strategy, _sized(1), tool_outcomes=ran) == (
            "on_tools_success_threshold: reset succeeded",
        )
        failed = ToolOutcomes(failed=frozenset({"deploy", "checkout"}))
        assert trigger_reasons(strategy, _sized(1), tool_outcomes=failed) == (
            "on_tools_error_threshold: deploy failed",
        )
        assert trigger_reasons(strategy, _sized(1)) == ()


class TestPlan:
    """A fired strategy folds all but the last interaction_keep interactions."""

    def test_keeps_the_last_interaction_keep(self) -> None:
        strategy = SummarizerStrategy(interaction_threshold_qty=5, interaction_keep=2)
        plan = plan_long_term(strategy, _sized(5))
        assert plan.fired
        assert [i.index for i in plan.fold] == [0, 1, 2]
        assert [i.index for i in plan.keep] == [3, 4]

    def test_not_fired_keeps_everything(self) -> None:
        plan = plan_long_term(NeuralyzerStrategy(interaction_keep=1), _sized(4))
        assert not plan.fired
        assert plan.fold == []
        assert [i.index for i in plan.keep] == [0, 1, 2, 3]

    def test_neuralyzer_erases_all_but_the_kept(self) -> None:
        strategy = NeuralyzerStrategy(interaction_keep=1, on_tools_success_threshold=["reset"])
        plan = plan_long_term(
            strategy, _sized(4), tool_outcomes=ToolOutcomes(succeeded=frozenset({"reset"}))
        )
        assert plan.fired
        assert [i.index for i in plan.keep] == [3]
        assert len(plan.fold) == 3

    def test_nothing_beyond_keep_does_not_fire(self) -> None:
        strategy = NeuralyzerStrategy(input_tokens_threshold=10, interaction_keep=3)
        plan = plan_long_term(strategy, _sized(3), input_tokens=50)
        assert plan.reasons == ("input_tokens_threshold: 50 > 10",)
        assert not plan.fired
        assert len(plan.keep) == 3


class Script:
    """A FunctionModel answering each chain-of-density loop from a script, counting calls."""

    def __init__(self, answers: list[tuple[list[str], str] | Exception]) -> None:
        self.answers = answers
        self.prompts: list[str] = []
        self.instructions: list[str | None] = []

    @property
    def calls(self) -> int:
        return len(self.prompts)

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = messages[-1].parts[-1]
        assert isinstance(prompt, UserPromptPart)
        self.prompts.append(str(prompt.content))
        self.instructions.append(info.instructions)
        answer = self.answers[min(len(self.prompts), len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        missing, summary = answer
        return ModelResponse(
            parts=[
                ToolCallPart(
                    info.output_tools[0].name, {"missing_entities": missing, "summary": summary}
                )
            ]
        )

    def model(self) -> FunctionModel:
        return FunctionModel(self)


_TEXT = format_interactions([interaction(0), interaction(1, tool_name="book_flight")])

Run = Callable[..., str]


def _sync(model: FunctionModel, *args: object, **kwargs: object) -> str:
    return chain_of_density_summary(model, *args, **kwargs)  # type: ignore[arg-type]


def _async(model: FunctionModel, *args: object, **kwargs: object) -> str:
    return asyncio.run(async_chain_of_density_summary(model, *args, **kwargs))  # type: ignore[arg-type]


@pytest.fixture(params=["sync", "async"])
def run(request: pytest.FixtureRequest) -> Run:
    """Each runner of the one chain-of-density loop."""
    return _sync if request.param == "sync" else _async


class TestChainOfDensity:
    """At most max_loops model calls, each asked for a denser summary that is not longer."""

    def test_runs_max_loops_while_facts_are_missing(self, run: Run) -> None:
        script = Script(
            [
                (["Paris"], "The user asked about the weather in Paris and more."),
                (["21 C"], "User asked Paris weather: sunny, 21 C."),
                (["flight"], "Paris: sunny, 21 C; flight booked."),
                (["never asked"], "unused"),
            ]
        )
        summary = run(script.model(), _TEXT, max_loops=3)
        assert script.calls == 3
        assert summary == "Paris: sunny, 21 C; flight booked."

    def test_the_strategy_sets_the_loops(self, run: Run) -> None:
        strategy = SummarizerStrategy.model_validate({"cod_max_loops": 2})
        script = Script([(["a"], "one two three"), (["b"], "one two")])
        run(script.model(), _TEXT, max_loops=strategy.cod_max_loops)
        assert script.calls == 2

    def test_one_loop_is_one_call(self, run: Run) -> None:
        script = Script([(["a"], "first")])
        assert run(script.model(), _TEXT, max_loops=1) == "first"
        assert script.calls == 1

    def test_stops_when_nothing_is_missing(self, run: Run) -> None:
        script = Script([(["a"], "first summary here"), ([], "first summary")])
        assert run(script.model(), _TEXT, max_loops=5) == "first summary"
        assert script.calls == 2

    def test_a_longer_answer_is_refused_and_ends_the_chain(self, run: Run) -> None:
        script = Script(
            [(["a"], "short summary"), (["b"], "a much, much longer summary than before")]
        )
        assert run(script.model(), _TEXT, max_loops=5) == "short summary"
        assert script.calls == 2

    def test_each_loop_is_given_the_summary_and_its_length(self, run: Run) -> None:
        script = Script([(["a"], "sunny in Paris"), (["b"], "Paris sunny")])
        run(script.model(), _TEXT, "earlier: user lives in Lyon", max_loops=2)
        assert "<previous_summary>\nearlier: user lives in Lyon" in script.prompts[0]
        assert "question 1" in script.prompts[0]
        tokens = TokenEstimator().estimate("sunny in Paris")
        assert "<current_summary>\nsunny in Paris\n</current_summary>" in script.prompts[1]
        assert f"at most {tokens} tokens" in script.prompts[1]
        assert "must not grow" in script.prompts[1]

    def test_instructions_reach_the_model(self, run: Run) -> None:
        script = Script([(["a"], "s")])
        run(script.model(), _TEXT, max_loops=1, instructions="Focus on decisions made.")
        assert script.instructions[0] is not None
        assert script.instructions[0].endswith("Focus on decisions made.")

    def test_the_first_summary_is_cut_to_max_summary_tokens(self, run: Run) -> None:
        script = Script([(["a"], " ".join(f"fact{i}." for i in range(200)))])
        summary = run(script.model(), _TEXT, max_loops=1, max_summary_tokens=20)
        assert TokenEstimator().estimate(summary) <= 20

    def test_a_later_failure_keeps_the_summary_so_far(
        self, run: Run, caplog: pytest.LogCaptureFixture
    ) -> None:
        script = Script([(["a"], "kept"), ModelHTTPError(503, "fake-model")])
        with caplog.at_level(logging.WARNING, logger="memlane"):
            assert run(script.model(), _TEXT, max_loops=4) == "kept"
        assert script.calls == 2
        assert "loop 2 failed" in caplog.text

    def test_a_first_failure_raises(self, run: Run) -> None:
        script = Script([ModelHTTPError(503, "fake-model")])
        with pytest.raises(ModelHTTPError):
            run(script.model(), _TEXT, max_loops=3)

    def test_an_empty_first_summary_raises(self, run: Run) -> None:
        with pytest.raises(ValueError, match="no summary"):
            run(Script([(["a"], "  ")]).model(), _TEXT, max_loops=3)

    def test_max_loops_below_one(self, run: Run) -> None:
        with pytest.raises(ValueError, match="max_loops"):
            run(Script([(["a"], "s")]).model(), _TEXT, max_loops=0)


def test_format_interactions() -> None:
    """Interactions become one line per part, tools included."""
    assert format_interactions([interaction(3)]).splitlines() == [
        "[interaction 3]",
        "User: question 3",
        "Assistant: checking 0",
        'Tool call: get_weather({"city":"Paris"})',
        "Tool result (get_weather): sunny, 21 C",
        "Assistant: answer 3",
    ]
    retry = Interaction(
        [
            ModelRequest(
                parts=[RetryFeedbackPart(content="be brief", retry=RetryInfo(cause="model_retry"))]
            )
        ],
        4,
    )
    assert format_interactions([retry]).splitlines() == ["[interaction 4]", "Retry: be brief"]


class TestSplitter:
    """Chunks of at most chunk_size tokens, cut where a reader would, overlapping as asked."""

    def test_empty(self, impl: _backend.Implementation) -> None:
        assert split_text("", TextSplitterConfig()) == []

    def test_short_text_is_one_chunk(self, impl: _backend.Implementation) -> None:
        assert split_text("A short summary.", TextSplitterConfig()) == ["A short summary."]

    def test_cuts_at_paragraphs_first(self, impl: _backend.Implementation) -> None:
        para = "The user prefers window seats. They fly to Paris in May."
        tokens = TokenEstimator().estimate(para + "\n\n")
        config = TextSplitterConfig(chunk_size=tokens + 2, chunk_overlap=0)
        text = "\n\n".join([para] * 3)
        assert split_text(text, config) == [para + "\n\n", para + "\n\n", para]

    def test_overlap_repeats_the_end_of_the_previous_chunk(
        self, impl: _backend.Implementation
    ) -> None:
        text = " ".join(f"w{i}" for i in range(60))
        config = TextSplitterConfig(chunk_size=12, chunk_overlap=4)
        chunks = split_text(text, config)
        count = TokenEstimator().estimate
        assert len(chunks) > 3
        for before, after in itertools.pairwise(chunks):
            shared = max(k for k in range(len(after) + 1) if before.endswith(after[:k]))
            assert shared > 0
            assert count(after[:shared]) <= 4
        assert chunks[0].startswith("w0 ")
        assert chunks[-1].endswith("w59")

    @settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        text=st.lists(
            st.sampled_from([*"ab cdé 🙂\n.", "\n\n", ". ", "word ", "Zürich "]), max_size=150
        ).map("".join),
        size=st.integers(8, 60),
        overlap_share=st.floats(0, 0.9),
    )
    def test_chunks_fit_and_cover_the_text(
        self, impl: _backend.Implementation, text: str, size: int, overlap_share: float
    ) -> None:
        count = TokenEstimator().estimate
        overlap = int(size * overlap_share)
        chunks = split_text(text, TextSplitterConfig(chunk_size=size, chunk_overlap=overlap))
        assert all(count(chunk) <= size for chunk in chunks)
        assert all(chunk in text for chunk in chunks)
        if overlap == 0:
            assert "".join(chunks) == text
        elif chunks:
            assert text.startswith(chunks[0])
            assert text.endswith(chunks[-1])
