"""memlane.strategies short-term: the max-tokens window with conditions, and tool-result
clearing, on both implementations' token counts."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart

from memlane import TokenEstimator, _backend
from memlane.strategies import (
    CLEARED_PREFIX,
    Interaction,
    MemoryMaxTokensStrategy,
    ToolResultClearing,
    apply_short_term,
    group_interactions,
    keep_max_tokens,
    message_token_counter,
    select_short_term,
)
from strategy_messages import call_ids, exchange, interaction, kinds


class Counting:
    """A token counter that counts as memlane does and records how often it was asked."""

    def __init__(self) -> None:
        self.calls = 0
        self._count = message_token_counter()

    def __call__(self, messages: Sequence[ModelMessage]) -> int:
        self.calls += 1
        return self._count(messages)


class TestConditions:
    """Parts a condition rejects are left out, and so is the other half of their tool pair."""

    def test_no_tool_role_sends_no_tool_calls_and_no_returns(
        self, impl: _backend.Implementation
    ) -> None:
        history = exchange(0, tools=2) + exchange(1)
        sent = apply_short_term(
            MemoryMaxTokensStrategy(conditions=["message.role != 'tool'"]),
            group_interactions(history),
        )
        assert kinds(sent) == ["user-prompt", "text", "text", "text", "user-prompt", "text", "text"]
        assert call_ids(sent) == ([], [])
        assert all(message.parts for message in sent)

    def test_dropping_a_call_drops_its_return(self, impl: _backend.Implementation) -> None:
        # The calls' arguments mention Paris; the returns do not, yet they go with their calls.
        history = exchange(0)
        sent = apply_short_term(
            MemoryMaxTokensStrategy(conditions=["'Paris' not in message.content"]),
            group_interactions(history),
        )
        assert kinds(sent) == ["user-prompt", "text", "text"]

    def test_dropping_a_return_drops_its_call(self, impl: _backend.Implementation) -> None:
        history = exchange(0, result="secret: 42")
        sent = apply_short_term(
            MemoryMaxTokensStrategy(conditions=["not message.content.startswith('secret')"]),
            group_interactions(history),
        )
        assert kinds(sent) == ["user-prompt", "text", "text"]

    def test_conditions_see_the_interaction(self, impl: _backend.Implementation) -> None:
        # Tool traffic only in the newest interaction.
        history = exchange(0) + exchange(1) + exchange(2)
        sent = apply_short_term(
            MemoryMaxTokensStrategy(conditions=["message.role != 'tool' or interaction.age == 0"]),
            group_interactions(history),
        )
        assert call_ids(sent) == (["call-2-0"], ["call-2-0"])

    def test_an_interaction_filtered_to_nothing_is_left_out(
        self, impl: _backend.Implementation
    ) -> None:
        history = exchange(0) + exchange(1)
        sent = apply_short_term(
            MemoryMaxTokensStrategy(conditions=["interaction.index != 0"]),
            group_interactions(history),
        )
        assert sent == exchange(1)

    def test_the_budget_counts_what_is_left(self, impl: _backend.Implementation) -> None:
        # Raw, each interaction is far over the budget; without its tool parts both fit.
        big = "x " * 2000
        interactions = group_interactions(exchange(0, result=big) + exchange(1, result=big))
        count = message_token_counter()
        no_tools = ["message.role != 'tool'"]
        filtered = apply_short_term(
            MemoryMaxTokensStrategy(memory_max_tokens=10**9, conditions=no_tools), interactions
        )
        budget = count(filtered)
        assert budget < 2000
        fits = MemoryMaxTokensStrategy(memory_max_tokens=budget, conditions=no_tools)
        assert apply_short_term(fits, interactions) == filtered
        short = MemoryMaxTokensStrategy(memory_max_tokens=budget - 1, conditions=no_tools)
        assert kinds(apply_short_term(short, interactions)) == ["user-prompt", "text", "text"]


class TestBudget:
    """Whole interactions, newest first, until the next one does not fit."""

    def test_keeps_a_suffix_and_stops_at_the_first_misfit(
        self, impl: _backend.Implementation
    ) -> None:
        count = message_token_counter()
        small0, big, small2 = (
            exchange(0, tools=0),
            exchange(1, result="y " * 500),
            exchange(2, tools=0),
        )
        interactions = group_interactions(small0 + big + small2)
        # Room for the newest and the oldest, but not for the big one between them.
        budget = count(small2) + count(small0) + 5
        assert count(big) > budget
        sent = apply_short_term(MemoryMaxTokensStrategy(memory_max_tokens=budget), interactions)
        assert sent == small2

    def test_exact_fit(self, impl: _backend.Implementation) -> None:
        count = message_token_counter()
        history = exchange(0) + exchange(1)
        budget = count(history)
        strategy = MemoryMaxTokensStrategy(memory_max_tokens=budget)
        assert apply_short_term(strategy, group_interactions(history)) == history
        smaller = MemoryMaxTokensStrategy(memory_max_tokens=budget - 1)
        assert apply_short_term(smaller, group_interactions(history)) == exchange(1)

    @pytest.mark.parametrize("budget", [-1, 0])
    def test_minus_one_and_zero_include_nothing(
        self, impl: _backend.Implementation, budget: int
    ) -> None:
        strategy = MemoryMaxTokensStrategy(memory_max_tokens=budget)
        assert apply_short_term(strategy, group_interactions(exchange(0))) == []

    def test_known_tokens_are_not_counted_again(self) -> None:
        counter = Counting()
        interactions = [Interaction(exchange(i), i, tokens=10) for i in range(5)]
        kept = select_short_term(
            MemoryMaxTokensStrategy(memory_max_tokens=30), interactions, counter
        )
        assert [i.index for i in kept] == [2, 3, 4]
        assert counter.calls == 0

    def test_a_cache_spares_the_next_walk_filtering_and_counting(
        self, impl: _backend.Implementation
    ) -> None:
        strategy = MemoryMaxTokensStrategy(conditions=["message.role != 'tool'"])
        interactions = [interaction(i) for i in range(6)]
        counter = Counting()
        cache: dict[object, object] = {}
        first = keep_max_tokens(strategy, interactions, counter, cache)
        assert counter.calls == 6
        again = keep_max_tokens(strategy, [*interactions, interaction(6)], counter, cache)
        assert counter.calls == 7  # only the new interaction
        assert again[:-1] == first
        assert again == keep_max_tokens(strategy, [*interactions, interaction(6)], counter)

    def test_no_cache_when_a_condition_reads_the_age(self, impl: _backend.Implementation) -> None:
        strategy = MemoryMaxTokensStrategy(conditions=["interaction.age < 2"])
        interactions = [interaction(i) for i in range(4)]
        cache: dict[object, object] = {}
        assert [i.index for i in keep_max_tokens(strategy, interactions, Counting(), cache)] == [
            2,
            3,
        ]
        assert cache == {}
        longer = [*interactions, interaction(4)]
        assert [i.index for i in keep_max_tokens(strategy, longer, Counting(), cache)] == [3, 4]

    def test_a_pair_split_across_interactions_stays_whole(
        self, impl: _backend.Implementation
    ) -> None:
        # The call is in interaction 0 and its return opens interaction 1 (a deferred tool).
        first = exchange(0)[:2]
        second = [first_return := exchange(0)[2], *exchange(1, tools=0)]
        assert isinstance(first_return, ModelRequest)
        interactions = [Interaction(first, 0, 1000), Interaction(second, 1, 5)]
        kept = select_short_term(MemoryMaxTokensStrategy(memory_max_tokens=100), interactions)
        sent = [m for i in kept for m in i.messages]
        assert call_ids(sent) == ([], [])
        assert kinds(sent) == ["user-prompt", "text"]

    def test_an_unanswered_call_in_the_input_is_kept(self, impl: _backend.Implementation) -> None:
        # A call still waiting for its (deferred) result was unpaired before any strategy ran.
        pending = exchange(0)[:2]
        sent = apply_short_term(MemoryMaxTokensStrategy(), [Interaction(pending, 0)])
        assert sent == pending

    def test_strategies_apply_in_order(self, impl: _backend.Implementation) -> None:
        count = message_token_counter()
        history = exchange(0, result="z " * 400) + exchange(1, result="z " * 400)
        interactions = group_interactions(history)
        budget = count(history) - 300
        alone = apply_short_term(MemoryMaxTokensStrategy(memory_max_tokens=budget), interactions)
        assert alone == exchange(1, result="z " * 400)
        chained = apply_short_term(
            [ToolResultClearing(keep_last=1), MemoryMaxTokensStrategy(memory_max_tokens=budget)],
            interactions,
        )
        assert len(chained) == len(history)

    def test_not_a_strategy(self) -> None:
        with pytest.raises(TypeError, match="not a short-term strategy"):
            select_short_term(["max_tokens"], [], lambda m: 0)  # type: ignore[list-item]


_CONDITIONS = [
    "message.role != 'tool'",
    "'Paris' not in message.content",
    "not message.content.startswith('big')",
    "message.role != 'user'",
    "interaction.age < 3 or message.role != 'tool'",
    "len(message.content) < 300",
]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shapes=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 120), st.booleans()), max_size=8),
    conditions=st.lists(st.sampled_from(_CONDITIONS), max_size=2, unique=True),
    budget=st.integers(-1, 1500),
)
def test_pairs_stay_whole_and_a_suffix_fits_the_budget(
    impl: _backend.Implementation,
    shapes: list[tuple[int, int, bool]],
    conditions: list[str],
    budget: int,
) -> None:
    """Whatever the budget and the conditions, tool pairs are whole and the kept interactions
    are a suffix of those not filtered to nothing, within the budget."""
    interactions = [
        interaction(i, tools=tools, result=("big " if big else "") + "r " * size)
        for i, (tools, size, big) in enumerate(shapes)
    ]
    count = message_token_counter()
    strategy = MemoryMaxTokensStrategy(memory_max_tokens=budget, conditions=conditions)
    kept = select_short_term(strategy, interactions, count)
    sent = [m for i in kept for m in i.messages]

    calls, returns = call_ids(sent)
    assert sorted(calls) == sorted(returns)
    assert all(message.parts for message in sent)
    assert count(sent) <= max(budget, 0)

    # A cache filled by the previous turn's walk changes nothing, even after clearing.
    cache: dict[object, object] = {}
    keep_max_tokens(strategy, interactions[:-1], count, cache)
    assert keep_max_tokens(strategy, interactions, count, cache) == kept
    chain: list[MemoryMaxTokensStrategy | ToolResultClearing] = [
        ToolResultClearing(keep_last=2),
        strategy,
    ]
    select_short_term(chain, interactions[:-1], count, cache)
    assert select_short_term(chain, interactions, count, cache) == select_short_term(
        chain, interactions, count
    )

    unlimited = MemoryMaxTokensStrategy(memory_max_tokens=10**9, conditions=conditions)
    non_empty = [i.index for i in select_short_term(unlimited, interactions, count)]
    indices = [i.index for i in kept]
    assert indices == non_empty[len(non_empty) - len(indices) :]


class TestToolResultClearing:
    """Old tool results become a placeholder naming their tokens; pairs stay whole."""

    def test_clears_results_older_than_keep_last(self, impl: _backend.Implementation) -> None:
        result = "a long result " * 50
        history = (
            exchange(0, result=result, tools=2)
            + exchange(1, result=result)
            + exchange(2, result=result)
        )
        cost = message_token_counter()(
            [ModelRequest(parts=[exchange(0, result=result)[2].parts[0]])]  # type: ignore[list-item]
        )
        sent = apply_short_term(ToolResultClearing(keep_last=1), group_interactions(history))
        returns = [p for m in sent for p in m.parts if isinstance(p, ToolReturnPart)]
        assert [r.content for r in returns] == [f"{CLEARED_PREFIX}{cost} tokens]"] * 3 + [result]
        assert call_ids(sent) == call_ids(history)
        assert kinds(sent) == kinds(history)
        assert [r.tool_name for r in returns] == ["get_weather"] * 4

    def test_keep_last_zero_clears_all_and_many_clears_none(
        self, impl: _backend.Implementation
    ) -> None:
        history = exchange(0, result="long " * 40) + exchange(1, result="long " * 40)
        interactions = group_interactions(history)
        cleared = apply_short_term(ToolResultClearing(keep_last=0), interactions)
        assert all(
            str(p.content).startswith(CLEARED_PREFIX)
            for m in cleared
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        )
        assert apply_short_term(ToolResultClearing(keep_last=5), interactions) == history

    def test_short_results_stay_and_clearing_twice_changes_nothing(
        self, impl: _backend.Implementation
    ) -> None:
        history = exchange(0, result="ok") + exchange(1, result="long " * 40) + exchange(2)
        interactions = group_interactions(history)
        once = select_short_term(ToolResultClearing(keep_last=1), interactions)
        contents = [
            str(p.content)
            for i in once
            for m in i.messages
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        assert contents[0] == "ok"
        assert contents[1].startswith(CLEARED_PREFIX)
        twice = select_short_term(ToolResultClearing(keep_last=1), once)
        assert [m for i in twice for m in i.messages] == [m for i in once for m in i.messages]

    def test_cleared_interactions_are_recounted(self, impl: _backend.Implementation) -> None:
        count = message_token_counter()
        history = exchange(0, result="long " * 200)
        before = group_interactions(history, count)
        after = select_short_term(ToolResultClearing(keep_last=0), before, count)
        assert after[0].tokens == count(after[0].messages)
        assert after[0].tokens < before[0].tokens  # type: ignore[operator]


def test_the_default_counter_follows_the_active_implementation(
    impl: _backend.Implementation,
) -> None:
    """Counts equal an exact TokenEstimator's on the implementation under test."""
    history = exchange(0, result="résumé naïve 🙂 " * 30)
    texts_total = sum(
        TokenEstimator().estimate_many(
            [
                "question 0",
                "checking 0",
                "get_weather",
                '{"city":"Paris"}',
                "get_weather",
                "résumé naïve 🙂 " * 30,
                "answer 0",
            ]
        )
    )
    assert message_token_counter()(history) == texts_total
