"""An agent with memory on SQLite: the conversation survives a restart of the process.

Run it twice: the second run continues the first run's conversation from the database file.
Offline by default (a scripted pydantic-ai FunctionModel); pass a model string, e.g.
``python examples/agent_sqlite.py openai:gpt-4o-mini`` with ``pip install 'memlane[llm]'``
and OPENAI_API_KEY set, to talk to a real one. Inspect what it stored with
``memlane conversations --store sqlite:///agent.sqlite3``.
"""

from __future__ import annotations

import sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memlane import MemoryManager, SQLiteStore
from memlane.agents import MemoryAgent

DB = "agent.sqlite3"
CONVERSATION = "support-chat"


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Answers with what it was sent: how many earlier user prompts memory delivered."""
    prompts = [p for m in messages for p in m.parts if isinstance(p, UserPromptPart)]
    return ModelResponse(parts=[TextPart(f"I can see {len(prompts) - 1} earlier message(s).")])


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else FunctionModel(scripted)
    with SQLiteStore(DB) as store:
        memory = MemoryManager(store=store, max_conversation_tokens=2_000)
        agent = MemoryAgent(Agent(model, instructions="Be brief."), memory=memory)
        for prompt in ("Hi, my order 1234 has not arrived.", "It was due on Monday."):
            result = agent.run_sync(prompt, conversation_id=CONVERSATION)
            print(f"you:   {prompt}\nagent: {result.output}")
        turns = memory.get_turns(CONVERSATION)
        print(f"{len(turns)} turns stored in {DB}; run again to continue the conversation")


if __name__ == "__main__":
    main()
