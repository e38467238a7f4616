"""memlane.summarization: LLM summaries on pydantic-ai's offline FunctionModel."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai import Agent, ModelHTTPError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memlane import ConversationMemory, ConversationTurn, MemoryManager, TokenEstimator
from memlane.agents import MemoryAgent
from memlane.summarization import (
    DEFAULT_SUMMARY_MODEL,
    LLMSummarizer,
    fit_tokens,
    format_turns,
)

EXACT = TokenEstimator()


def _prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                return part.content
    raise AssertionError("no prompt")


def _replying(text: str) -> FunctionModel:
    return FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart(text)]))


def _failing(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise ModelHTTPError(503, "fake-model")


def _turn(i: int, user: str, assistant: str, **kwargs: object) -> ConversationTurn:
    return ConversationTurn(turn_id=i, user_prompt=user, assistant_response=assistant, **kwargs)  # type: ignore[arg-type]


def _summary_turn(text: str) -> ConversationTurn:
    return _turn(0, "", text, metadata={"summary": True})


class TestCreateLLMSummarizer:
    """LLMSummarizer.from_config checks its template and budget."""

    def test_defaults(self) -> None:
        summarizer = LLMSummarizer.from_config()
        assert isinstance(summarizer, LLMSummarizer)
        assert summarizer.model == DEFAULT_SUMMARY_MODEL
        assert summarizer.max_summary_tokens == 500
        assert callable(summarizer)
        assert inspect.iscoroutinefunction(summarizer.async_summarize)

    def test_template_needs_turns_text(self) -> None:
        with pytest.raises(ValueError, match=r"\{turns_text\}"):
            LLMSummarizer.from_config(prompt_template="Summarise: {turns}")

    def test_template_with_another_placeholder_is_refused(self) -> None:
        with pytest.raises(ValueError, match="placeholder"):
            LLMSummarizer.from_config(prompt_template="{turns_text} for {user}")

    def test_template_literal_braces_doubled(self) -> None:
        summarizer = LLMSummarizer.from_config(
            prompt_template='Answer as {{"summary": ...}}. {turns_text}'
        )
        assert summarizer.prompt([_turn(0, "hi", "hello")]).startswith(
            'Answer as {"summary": ...}. New turns:'
        )

    @pytest.mark.parametrize("bad", [0, -5])
    def test_budget_must_be_positive(self, bad: int) -> None:
        with pytest.raises(ValueError, match="max_summary_tokens"):
            LLMSummarizer.from_config(max_summary_tokens=bad)

    def test_budget_must_be_an_int(self) -> None:
        with pytest.raises(TypeError, match="max_summary_tokens"):
            LLMSummarizer.from_config(max_summary_tokens=1.5)  # type: ignore[arg-type]


class TestFoldsThePreviousSummary:
    """The model is sent the previous summary and the evicted turns, tool calls included."""

    def test_prompt_holds_summary_turns_and_tools(self) -> None:
        prompts: list[str] = []

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            prompts.append(_prompt(messages))
            return ModelResponse(parts=[TextPart("Ada lives in Lisbon; it is sunny there.")])

        tool_turn = _turn(
            3,
            "Weather in Lisbon?",
            "Sunny.",
            raw_messages=[
                ModelRequest(parts=[UserPromptPart("Weather in Lisbon?")]),
                ModelResponse(
                    parts=[ToolCallPart("weather", {"city": "Lisbon"}, tool_call_id="w")]
                ),
                ModelRequest(parts=[ToolReturnPart("weather", "sunny, 24°C", tool_call_id="w")]),
                ModelResponse(parts=[TextPart("Sunny.")]),
            ],
        )
        summarizer = LLMSummarizer.from_config(model=FunctionModel(model), max_summary_tokens=120)
        summary = summarizer([_summary_turn("Ada lives in Lisbon."), tool_turn])
        assert summary == "Ada lives in Lisbon; it is sunny there."
        [prompt] = prompts
        assert "Previous summary:\nAda lives in Lisbon." in prompt
        assert "User: Weather in Lisbon?" in prompt
        assert 'Tool call: weather({"city":"Lisbon"})' in prompt
        assert "Tool result (weather): sunny, 24°C" in prompt
        assert "Assistant: Sunny." in prompt
        assert "at most 120 tokens" in prompt

    def test_format_turns_includes_tool_results(self) -> None:
        turn = _turn(
            1,
            "q",
            "a",
            raw_messages=[
                ModelRequest(parts=[ToolReturnPart("lookup", {"hits": 3}, tool_call_id="x")])
            ],
        )
        assert 'Tool result (lookup): {"hits":3}' in format_turns([turn])


class TestSummaryStaysBounded:
    """The summary is cut to max_summary_tokens (the memory's estimator), however long."""

    def test_a_long_answer_is_cut(self) -> None:
        long_answer = " ".join(f"fact{i} is important." for i in range(2000))
        summarizer = LLMSummarizer.from_config(model=_replying(long_answer), max_summary_tokens=50)
        summary = summarizer([_turn(0, "hi", "hello")])
        assert EXACT.estimate(summary) <= 50
        assert summary.startswith("fact0 is important.")
        assert summary.endswith("fact1999 is important.")

    def test_the_memorys_estimator_is_used(self) -> None:
        heuristic = TokenEstimator(mode="heuristic")
        long_answer = "word " * 1000
        summarizer = LLMSummarizer.from_config(
            model=_replying(long_answer), max_summary_tokens=30, estimator=heuristic
        )
        assert heuristic.estimate(summarizer([_turn(0, "a", "b")])) <= 30

    async def test_a_rolling_summary_does_not_grow(self) -> None:
        def verbose(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            return ModelResponse(parts=[TextPart(_prompt(messages) + " and more" * 50)])

        memory = ConversationMemory(
            max_tokens=300,
            summarize_threshold=150,
            summarizer=LLMSummarizer.from_config(
                model=FunctionModel(verbose), max_summary_tokens=80
            ),
        )
        sizes = []
        for i in range(30):
            await memory.async_add_turn("c", f"question {i} " * 8, f"answer {i} " * 8)
            summary = memory.get_summary("c")
            if summary is not None:
                sizes.append(EXACT.estimate(summary))
        assert sizes
        assert max(sizes) <= 80


class TestFallsBackToAnExtractiveSummary:
    """On any model failure the summary is extractive and deterministic, and a warning says so."""

    def test_model_error(self, caplog: pytest.LogCaptureFixture) -> None:
        summarizer = LLMSummarizer.from_config(
            model=FunctionModel(_failing), max_summary_tokens=100
        )
        turns = [_summary_turn("Ada lives in Lisbon."), _turn(4, "My cat is Miso.", "Nice name!")]
        with caplog.at_level(logging.WARNING, logger="memlane"):
            summary = summarizer(turns)
        assert summary == "Ada lives in Lisbon.\n- User: My cat is Miso. / Assistant: Nice name!"
        assert summarizer(turns) == summary
        assert any("LLM summary failed (ModelHTTPError" in r.getMessage() for r in caplog.records)

    async def test_model_error_async(self, caplog: pytest.LogCaptureFixture) -> None:
        summarizer = LLMSummarizer.from_config(model=FunctionModel(_failing))
        with caplog.at_level(logging.WARNING, logger="memlane"):
            summary = await summarizer.async_summarize([_turn(0, "hello", "hi")])
        assert summary == "- User: hello / Assistant: hi"
        assert "extractive" in caplog.text

    def test_no_provider_available(
        self, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        with caplog.at_level(logging.WARNING, logger="memlane"):
            summary = LLMSummarizer.from_config()([_turn(0, "hello", "hi")])
        assert summary == "- User: hello / Assistant: hi"
        assert "LLM summary failed" in caplog.text

    def test_empty_answer(self, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.WARNING, logger="memlane"):
            summary = LLMSummarizer.from_config(model=_replying("   "))([_turn(0, "hello", "hi")])
        assert summary == "- User: hello / Assistant: hi"
        assert "no text" in caplog.text

    def test_extractive_summary_is_bounded(self) -> None:
        summarizer = LLMSummarizer.from_config(model=FunctionModel(_failing), max_summary_tokens=60)
        turns = [_turn(i, f"question {i} " * 30, f"answer {i} " * 30) for i in range(20)]
        assert EXACT.estimate(summarizer.extractive_summary(turns)) <= 60


class TestInsideAnEventLoop:
    """Inside a running loop the async path is used: no nested loop, no thread of its own."""

    async def test_async_add_turn_awaits_the_model_on_the_running_loop(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        outer = asyncio.get_running_loop()
        loops: list[asyncio.AbstractEventLoop] = []

        async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            loops.append(asyncio.get_running_loop())
            return ModelResponse(parts=[TextPart("LLM SUMMARY")])

        def no_sync_call(self: LLMSummarizer, turns: list[ConversationTurn]) -> str:
            raise AssertionError("the sync path ran inside the event loop")

        monkeypatch.setattr(LLMSummarizer, "__call__", no_sync_call)
        memory = ConversationMemory(
            max_tokens=100,
            summarize_threshold=40,
            summarizer=LLMSummarizer.from_config(model=FunctionModel(model)),
        )
        for i in range(4):
            await memory.async_add_turn("c", f"question {i} " * 5, f"answer {i} " * 5)
        assert memory.get_summary("c") == "LLM SUMMARY"
        assert loops
        assert all(loop is outer for loop in loops)

    def test_sync_add_turn_outside_a_loop(self) -> None:
        memory = ConversationMemory(
            max_tokens=100,
            summarize_threshold=40,
            summarizer=LLMSummarizer.from_config(model=_replying("SYNC SUMMARY")),
        )
        for i in range(4):
            memory.add_turn("c", f"question {i} " * 5, f"answer {i} " * 5)
        assert memory.get_summary("c") == "SYNC SUMMARY"

    async def test_sync_call_inside_a_loop_falls_back(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        summarizer = LLMSummarizer.from_config(model=_replying("never asked"))
        with caplog.at_level(logging.WARNING, logger="memlane"):
            assert summarizer([_turn(0, "hello", "hi")]) == "- User: hello / Assistant: hi"
        assert "async_add_turn" in caplog.text


class TestFitTokens:
    """fit_tokens keeps the beginning and the end and never exceeds the budget."""

    def test_fitting_text_is_unchanged(self) -> None:
        assert fit_tokens("hello world", 2, EXACT) == "hello world"

    def test_keeps_both_ends(self) -> None:
        text = " ".join(f"w{i}" for i in range(500))
        cut = fit_tokens(text, 40, EXACT)
        assert cut.startswith("w0 w1")
        assert cut.endswith("w498 w499")
        assert "[…]" in cut
        assert EXACT.estimate(cut) <= 40

    def test_drops_whole_lines_when_it_can(self) -> None:
        lines = [f"- fact number {i} about the trip" for i in range(60)]
        cut = fit_tokens("\n".join(lines), 60, EXACT)
        head, tail = cut.split("\n[…]\n")
        assert head.splitlines() == lines[: len(head.splitlines())]
        assert tail.splitlines() == lines[-len(tail.splitlines()) :]
        assert EXACT.estimate(cut) <= 60

    def test_repeated_cuts_keep_one_elision(self) -> None:
        summary = ""
        for i in range(40):
            summary = fit_tokens(f"{summary}\n- fact number {i} about the trip".strip(), 50, EXACT)
        assert summary.count("[…]") == 1
        assert summary.startswith("- fact number 0")
        assert summary.endswith("- fact number 39 about the trip")

    @pytest.mark.parametrize("budget", [1, 2, 3, 5])
    def test_tiny_budgets(self, budget: int) -> None:
        assert (
            EXACT.estimate(fit_tokens("alpha beta gamma delta epsilon " * 20, budget, EXACT))
            <= budget
        )

    @given(text=st.text(min_size=0, max_size=400), budget=st.integers(min_value=1, max_value=60))
    def test_never_over_budget(self, text: str, budget: int) -> None:
        cut = fit_tokens(text, budget, EXACT)
        assert EXACT.estimate(cut) <= budget
        if EXACT.estimate(text) <= budget:
            assert cut == text


# ---------------------------------------------------------------------------- end to end


def _scripted_summarizer(prompts: list[str]) -> FunctionModel:
    """A summary model that keeps what the user said about themselves, and the previous summary."""

    async def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = _prompt(messages)
        prompts.append(prompt)
        previous = re.search(r"Previous summary:\n(.*?)\n\nNew turns:", prompt, re.DOTALL)
        facts = previous.group(1).splitlines() if previous else []
        facts += [
            f"- The user said: {said}"
            for said in re.findall(r"^User: (My .*)$", prompt, re.MULTILINE)
        ]
        return ModelResponse(parts=[TextPart("\n".join(facts) or "- Small talk only.")])

    return FunctionModel(summarize)


class TestAFactSurvivesInTheSummary:
    """A fact from turn 1 is evicted, kept by the summary, and reaches the model on turn 40."""

    async def test_turn_40_sees_turn_1(self) -> None:
        summary_prompts: list[str] = []
        memory = MemoryManager(
            max_conversation_tokens=400,
            summarize_threshold=300,
            summarizer=LLMSummarizer.from_config(
                model=_scripted_summarizer(summary_prompts), max_summary_tokens=100
            ),
        )
        received: list[list[ModelMessage]] = []

        def chat(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            received.append(list(messages))
            prompt = _prompt(messages)
            if prompt == "What is my locker code?":
                sent = "\n".join(str(getattr(p, "content", "")) for m in messages for p in m.parts)
                found = re.search(r"locker code is (\d+)", sent)
                return ModelResponse(
                    parts=[
                        TextPart(f"Your locker code is {found.group(1) if found else 'unknown'}.")
                    ]
                )
            return ModelResponse(
                parts=[
                    TextPart(f"Here are some thoughts on {prompt.lower()} " + "More detail. " * 10)
                ]
            )

        agent = MemoryAgent(Agent(FunctionModel(chat)), memory=memory)
        cid = (await agent.run("My locker code is 4417.")).conversation_id
        for n in range(2, 40):
            await agent.run(f"Tell me about topic {n}.", conversation_id=cid)
        answer = await agent.run("What is my locker code?", conversation_id=cid)

        assert answer.output == "Your locker code is 4417."
        assert memory.conversation.get_turns(cid)[0].turn_id > 0  # turn 1 was evicted
        turn_40 = received[-1]
        first = turn_40[0].parts[0]
        assert isinstance(first, SystemPromptPart)
        assert "My locker code is 4417." in first.content
        prompts = [p.content for m in turn_40 for p in m.parts if isinstance(p, UserPromptPart)]
        assert "My locker code is 4417." not in prompts
        # Later folds were sent the previous summary, and the summary stayed bounded.
        assert len(summary_prompts) > 1
        assert all(
            "Previous summary:\n- The user said: My locker code is 4417." in p
            for p in summary_prompts[1:]
        )
        assert EXACT.estimate(memory.conversation.get_summary(cid) or "") <= 100


class TestEstimatorHandOff:
    """A summarizer without its own estimator counts with the memory's."""

    def test_memory_estimator_is_adopted_unless_one_was_given(self) -> None:
        from memlane import ConversationMemory, TokenEstimator

        memory_estimator = TokenEstimator(mode="heuristic")
        adopted = LLMSummarizer.from_config(model="test")
        ConversationMemory(estimator=memory_estimator, summarizer=adopted)
        assert adopted.estimator is memory_estimator
        own = TokenEstimator(encoding_name="cl100k_base")
        kept = LLMSummarizer.from_config(model="test", estimator=own)
        ConversationMemory(estimator=memory_estimator, summarizer=kept)
        assert kept.estimator is own
