"""Builders of pydantic-ai interactions for the memlane.strategies tests."""

from __future__ import annotations

from datetime import UTC, datetime

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

from memlane.strategies import Interaction

AT = datetime(2026, 1, 1, tzinfo=UTC)


def exchange(
    i: int,
    *,
    tools: int = 1,
    result: str = "sunny, 21 C",
    tool_name: str = "get_weather",
    outcome: str = "success",
    system: str | None = None,
) -> list[ModelMessage]:
    """The messages of interaction ``i``: a prompt, ``tools`` tool round trips, an answer."""
    first: list[SystemPromptPart | UserPromptPart] = []
    if system is not None:
        first.append(SystemPromptPart(content=system, timestamp=AT))
    first.append(UserPromptPart(content=f"question {i}", timestamp=AT))
    messages: list[ModelMessage] = [ModelRequest(parts=first)]
    for t in range(tools):
        call_id = f"call-{i}-{t}"
        messages.append(
            ModelResponse(
                parts=[
                    TextPart(content=f"checking {t}"),
                    ToolCallPart(tool_name=tool_name, args={"city": "Paris"}, tool_call_id=call_id),
                ],
                timestamp=AT,
            )
        )
        messages.append(
            ModelRequest(
                parts=[
                    ToolReturnPart(
                        tool_name=tool_name,
                        content=result,
                        tool_call_id=call_id,
                        timestamp=AT,
                        outcome=outcome,  # type: ignore[arg-type]  # tests pass the literals
                    )
                ]
            )
        )
    messages.append(ModelResponse(parts=[TextPart(content=f"answer {i}")], timestamp=AT))
    return messages


def interaction(i: int, **kwargs: object) -> Interaction:
    """:func:`exchange` as an :class:`Interaction` with index ``i`` (tokens not counted)."""
    return Interaction(exchange(i, **kwargs), i)  # type: ignore[arg-type]


def kinds(messages: list[ModelMessage]) -> list[str]:
    """Every part's kind, in order."""
    return [part.part_kind for message in messages for part in message.parts]


def call_ids(messages: list[ModelMessage]) -> tuple[list[str], list[str]]:
    """The tool-call ids of the calls and of the returns, in order."""
    calls: list[str] = []
    returns: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                calls.append(part.tool_call_id)
            elif isinstance(part, ToolReturnPart):
                returns.append(part.tool_call_id)
    return calls, returns
