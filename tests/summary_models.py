"""Offline summary models for the summary tests: pydantic-ai ``FunctionModel``s that answer
in plain text, in the structured chain-of-density step, fail, hang until released, or answer
an empty string, each counting its calls and keeping the instructions it was given."""

from __future__ import annotations

import threading
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memlane.types import ConversationTurn

HANG_LIMIT = 30.0
"""The longest a hanging model waits to be released (a test releases it well before)."""


class SummaryModel:
    """A ``FunctionModel`` whose answers a test chooses.

    Args:
        kind: ``"text"``, ``"structured"``, ``"failing"``, ``"hanging"`` or ``"empty"``.
        answers: What the text and structured kinds answer, call after call (the last one
            repeats).
    """

    def __init__(self, kind: str, answers: list[str] | None = None) -> None:
        self.kind = kind
        self.answers = answers or ["dense summary v1: the user pays invoices on Fridays"]
        self.calls = 0
        self.instructions: list[str | None] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.model = FunctionModel(self._answer, model_name=f"summary-{kind}")

    def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        self.instructions.append(info.instructions)
        self.entered.set()
        if self.kind == "failing":
            raise ConnectionError("summary provider down")
        if self.kind == "hanging":
            self.release.wait(HANG_LIMIT)
        if self.kind == "empty":
            return ModelResponse(parts=[TextPart("")])
        text = self.answers[min(self.calls - 1, len(self.answers) - 1)]
        if self.kind == "structured":
            name = info.output_tools[0].name
            return ModelResponse(
                parts=[ToolCallPart(name, {"missing_entities": [], "summary": text})]
            )
        return ModelResponse(parts=[TextPart(text)])


class CountingSummarizer:
    """A plain ``summarizer(turns)``: the prompts it folds (the previous summary's text first),
    failing while ``up`` is false; records its inputs."""

    def __init__(self) -> None:
        self.up = True
        self.calls = 0
        self.inputs: list[list[ConversationTurn]] = []

    def __call__(self, turns: list[ConversationTurn]) -> str:
        self.calls += 1
        self.inputs.append(turns)
        if not self.up:
            raise ConnectionError("summary provider down")
        return " ".join(
            t.assistant_response if t.metadata.get("summary") else t.user_prompt
            for t in turns
            if not t.metadata.get("focus")
        )


class Clock:
    """A monotonic clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def call(memory: Any, name: str, mode: str, *args: Any, **kwargs: Any) -> Any:
    """``memory.name(...)`` or ``await memory.async_name(...)``, as ``mode`` says."""
    if mode == "sync":
        return getattr(memory, name)(*args, **kwargs)
    return await getattr(memory, f"async_{name}")(*args, **kwargs)
