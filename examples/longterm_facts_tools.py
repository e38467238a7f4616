"""Long-term facts with tools: what one run remembers about a user, the next run is told.

``MemoryAgent(..., long_term=True, user_id=...)`` gives the agent ``remember`` and ``recall``
tools bound to the user's scope and tells every run what long-term memory holds for them.
Offline: a scripted FunctionModel calls ``remember`` when the user says where they live.
"""

from __future__ import annotations

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memlane import MemoryManager, SQLiteStore
from memlane.agents import MemoryAgent


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Remembers the user's city once; otherwise answers from the instructions it was given."""
    last = messages[-1].parts[-1]
    if getattr(last, "content", None) == "I live in Adelaide.":
        return ModelResponse(parts=[ToolCallPart("remember", {"key": "city", "value": "Adelaide"})])
    known = [line for line in (info.instructions or "").splitlines() if "city" in line]
    return ModelResponse(
        parts=[TextPart(f"What I know: {known[0].strip() if known else 'nothing'}")]
    )


def main() -> None:
    with SQLiteStore("longterm.sqlite3") as store:
        manager = MemoryManager(store=store, long_term=True)
        assert manager.long_term is not None
        ada = manager.long_term.identify_user("telegram", 12345, display_name="Ada")
        agent = MemoryAgent(FunctionModel(scripted), memory=manager, long_term=True, user_id=ada.id)
        agent.run_sync("I live in Adelaide.")
        answer = agent.run_sync("Where do I live?")  # a new conversation: long-term memory
        print(answer.output)
        for fact in manager.long_term.facts(scope="user", scope_id=ada.id):
            print(f"fact in {fact.scope.value}:{fact.scope_id}: {fact}")


if __name__ == "__main__":
    main()
