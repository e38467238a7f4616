"""``python -m memlane demo``: a pydantic-ai agent conversation on memlane, shown turn by turn.

A travel assistant with two tools, memory on the embedded SQLite store, and a budget tight
enough that turns leave the window and are folded into a rolling summary. Offline (no model, or
no key for it) the agent and the summarizer run on scripted
:class:`~pydantic_ai.models.function.FunctionModel` s that only ever see what memlane sends them,
so what they answer shows what memory delivered.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import sys
from pathlib import Path
from typing import TextIO

import pydantic_ai
from pydantic_ai import Agent
from pydantic_ai.exceptions import AgentRunError, UserError
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, infer_model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memlane import BACKEND, MemoryManager, SQLiteStore, TokenEstimator
from memlane.agents import MemoryAgent
from memlane.errors import MemlaneError, StoreError
from memlane.messages import SUMMARY_PREFIX
from memlane.summarization import LLMSummarizer
from memlane.types import MemoryEntry

__all__ = [
    "DEFAULT_DEMO_DB",
    "DEMO_BUDGET",
    "DEMO_INSTRUCTIONS",
    "DEMO_SCRIPT",
    "DEMO_SUMMARIZE_ABOVE",
    "DEMO_SUMMARY_TOKENS",
    "DemoError",
    "run_demo",
]


class DemoError(MemlaneError):
    """The demo cannot run as asked; the message says what to change.

    Raised for a model that cannot be used, an unusable ``--db`` or an unknown ``--resume`` id.
    """


DEFAULT_DEMO_DB = ".memlane/memory.sqlite3"
"""Where the demo keeps its memory unless told otherwise."""

DEMO_BUDGET = 360
"""The history budget in tokens: tight, so turns leave the window within a few turns."""
DEMO_SUMMARY_TOKENS = 120
"""The most tokens the rolling summary may have."""
DEMO_SUMMARIZE_ABOVE = DEMO_BUDGET - DEMO_SUMMARY_TOKENS
"""Turns are summarised once they pass this many tokens: the summary's room is the rest of the
budget, so every turn is either sent or in the summary."""
DEMO_INSTRUCTIONS = (
    "You are a concise travel assistant. When the user tells you something about themselves "
    "or their trip, save it with remember(key, value). Use get_weather(city) for weather."
)
"""The travel assistant's instructions."""

_WEATHER = {
    "lisbon": "sunny, 22°C, light Atlantic breeze",
    "sintra": "misty morning, 18°C by noon",
    "porto": "showers likely, 17°C",
}

_RECALL = "RECALL"
DEMO_SCRIPT: list[tuple[str, list[tuple[str, dict[str, str]]], str]] = [
    (
        "Hi! I'm Ada, and I'm planning a week in Lisbon in May.",
        [
            ("remember", {"key": "name", "value": "Ada"}),
            ("remember", {"key": "trip", "value": "Lisbon, a week in May"}),
        ],
        "Nice to meet you, Ada! A week in Lisbon in May is a lovely plan; I've noted it.",
    ),
    (
        "What's the weather usually like there in May?",
        [("get_weather", {"city": "Lisbon"})],
        "Lisbon in May: {weather}. Pack light layers and a windbreaker for the evenings.",
    ),
    (
        "I'm vegetarian. Any food tips?",
        [("remember", {"key": "diet", "value": "vegetarian"})],
        (
            "Noted. Try the vegetable petiscos in Bairro Alto, grilled padrón peppers, queijo da "
            "Serra and, of course, pastéis de nata from Belém; most tascas will happily adapt a "
            "dish."
        ),
    ),
    (
        "Which neighbourhoods should I stay in?",
        [],
        (
            "Baixa and Chiado are central and flat-ish; Alfama is atmospheric but hilly; Príncipe "
            "Real is quieter with good cafés. For a first week, Chiado balances walking distance "
            "and calm nights."
        ),
    ),
    (
        "Can you suggest a day trip?",
        [("get_weather", {"city": "Sintra"})],
        (
            "Sintra, 40 minutes by train from Rossio: Pena Palace, Quinta da Regaleira and the "
            "Moorish castle. Expect {weather}, so start early and bring a jumper."
        ),
    ),
    (
        "My budget is about 1,200 euros without flights.",
        [("remember", {"key": "budget", "value": "1,200 EUR without flights"})],
        (
            "Got it: about 1,200 euros for the week is comfortable for a mid-range guesthouse, "
            "trams, museum tickets and eating out twice a day."
        ),
    ),
    (
        "How do I get from the airport to the city?",
        [],
        (
            "Take the red metro line from the airport and change at Alameda or São Sebastião; it "
            "takes about 30 minutes. A taxi or ride-hail to Chiado costs roughly 15 to 20 euros."
        ),
    ),
    (
        "Remind me: what do you know about me and my trip so far?",
        [],
        _RECALL,
    ),
    (
        "Is Porto worth a two-day detour?",
        [("get_weather", {"city": "Porto"})],
        (
            "Yes: the Ribeira waterfront, the Livraria Lello and a port-cellar tour in Gaia are "
            "worth two days. The forecast says {weather}, so pack an umbrella."
        ),
    ),
    (
        "Any tips for a Fado evening?",
        [],
        (
            "Book a small casa de fado in Alfama or Mouraria, arrive by 9 pm, and keep quiet "
            "during the songs; many have vegetarian plates if you ask ahead."
        ),
    ),
    (
        "Which museums are a must?",
        [],
        (
            "The Gulbenkian for its collection and gardens, the tile museum (Museu do Azulejo), "
            "and MAAT by the river for contemporary art."
        ),
    ),
    (
        "Summarise my plan, please.",
        [],
        _RECALL,
    ),
]
"""The user's prompts, each with the scripted model's tool calls and answer.

``{weather}`` in an answer is the last ``get_weather`` result; a ``RECALL`` answer is made from
the working memory and summary the model was actually sent.
"""


def _prompt_text(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        for part in reversed(message.parts):
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                return part.content
    return ""


def _recall(messages: list[ModelMessage], instructions: str | None) -> str:
    """What the scripted assistant can say from the facts and summary it was sent."""
    facts = re.findall(r"^- (\w+): (.+)$", instructions or "", re.MULTILINE)
    said = "; ".join(f"{k}: {v}" for k, v in facts) or "nothing saved yet"
    summary = next(
        (
            p.content[len(SUMMARY_PREFIX) :]
            for m in messages
            for p in m.parts
            if isinstance(p, SystemPromptPart) and p.content.startswith(SUMMARY_PREFIX)
        ),
        None,
    )
    earlier = f" Earlier we covered: {summary.splitlines()[0].lstrip('- ')}" if summary else ""
    return f"From my notes: {said}.{earlier}"


def _scripted_chat(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The offline assistant: calls the scripted tools, then answers from their results."""
    prompt = _prompt_text(messages)
    tools, answer = next(
        ((t, a) for p, t, a in DEMO_SCRIPT if p == prompt), ([], f"Happy to help with: {prompt}")
    )
    returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    if tools and not returns:
        return ModelResponse(parts=[ToolCallPart(name, args) for name, args in tools])
    if answer == _RECALL:
        return ModelResponse(parts=[TextPart(_recall(messages, info.instructions))])
    weather = next((str(r.content) for r in returns if r.tool_name == "get_weather"), "")
    return ModelResponse(parts=[TextPart(answer.format(weather=weather))])


def _scripted_summary(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The offline summarizer: the previous summary plus one line per evicted turn."""
    prompt = _prompt_text(messages)
    previous = re.search(r"Previous summary:\n(.*?)\n\nNew turns:", prompt, re.DOTALL)
    lines = previous.group(1).splitlines() if previous else []
    for user, answer in re.findall(
        r"^User: (.*)\n(?:Tool .*\n)*Assistant: (.*)$", prompt, re.MULTILINE
    ):
        first_sentence = re.split(r"(?<=[.!?])\s", answer, maxsplit=1)[0]
        lines.append(f"- {user} → {first_sentence}")
    return ModelResponse(parts=[TextPart("\n".join(lines))])


def _choose_models(name: str | None) -> tuple[Model, Model, str]:
    """(chat model, summary model, what to tell the user)."""
    offline = FunctionModel(_scripted_chat, model_name="scripted-travel-assistant")
    summary = FunctionModel(_scripted_summary, model_name="scripted-summarizer")
    if name is None:
        return (
            offline,
            summary,
            (
                "offline scripted model (FunctionModel); pass --model openai:gpt-4o-mini with "
                "OPENAI_API_KEY set to talk to a real one"
            ),
        )
    try:
        model = infer_model(name)
    except (UserError, ImportError) as exc:
        # An explicit model that cannot be used is an error: quietly running the scripted
        # model instead would pass a misconfigured provider off as a working one.
        reason = str(exc).splitlines()[0]
        raise DemoError(
            f"the model {name!r} cannot be used here ({reason}); install the model providers "
            "with pip install 'memlane[llm]' and set the provider's API key, or leave out "
            "--model to run the offline scripted model"
        ) from None
    return model, model, f"{name} (summaries by the same model)"


def _demo_memory(db: str, summary_model: Model) -> tuple[SQLiteStore, MemoryManager]:
    store = SQLiteStore(db)
    estimator = TokenEstimator()
    memory = MemoryManager(
        store=store,
        max_conversation_tokens=DEMO_BUDGET,
        summarize_threshold=DEMO_SUMMARIZE_ABOVE,
        estimator=estimator,
        summarizer=LLMSummarizer.from_config(
            model=summary_model, max_summary_tokens=DEMO_SUMMARY_TOKENS, estimator=estimator
        ),
    )
    return store, memory


def _history_digest(memory: MemoryManager, cid: str) -> tuple[str, int, int]:
    history = memory.get_message_history(cid)
    digest = hashlib.sha256(ModelMessagesTypeAdapter.dump_json(history)).hexdigest()
    return digest, len(history), memory.conversation.get_history_tokens(cid)


_DIGEST_NAMESPACE = "memlane-demo"


def _save_digest(memory: MemoryManager, cid: str, digest: tuple[str, int, int]) -> None:
    memory.store.save(
        _DIGEST_NAMESPACE,
        MemoryEntry(
            key=cid, content={"sha256": digest[0], "messages": digest[1], "tokens": digest[2]}
        ),
    )


def _bar(value: int, total: int, width: int = 24) -> str:
    filled = min(width, round(width * value / total)) if total else 0
    return "█" * filled + "░" * (width - filled)


class _Progress:
    """A one-line progress bar on a terminal while the model works; silent otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.live = stream.isatty()

    def show(self, done: int, total: int, what: str) -> None:
        if self.live:
            self.stream.write(f"\r\x1b[K  [{_bar(done, total, 20)}] {done}/{total} {what}")
            self.stream.flush()

    def clear(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _turns_in(history: list[ModelMessage]) -> int:
    return sum(any(isinstance(p, UserPromptPart) for p in m.parts) for m in history)


def _tool_lines(messages: list[ModelMessage]) -> list[str]:
    calls = {p.tool_call_id: p for m in messages for p in m.parts if isinstance(p, ToolCallPart)}
    lines = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and part.tool_call_id in calls:
                args = ", ".join(
                    f"{k}={v!r}" for k, v in calls[part.tool_call_id].args_as_dict().items()
                )
                lines.append(f"{part.tool_name}({args}) -> {part.model_response_str()!r}")
    return lines


def _travel_agent(chat_model: Model, memory: MemoryManager) -> MemoryAgent[str]:
    agent = Agent(chat_model, instructions=DEMO_INSTRUCTIONS, name="travel-assistant")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The usual weather in a city in May."""
        return _WEATHER.get(city.lower(), "mild, 20°C")

    # Sequential: pydantic-ai runs one response's tool calls in parallel by default, and two
    # remembers in one response would then save (and list) their facts in either order.
    @agent.tool_plain(sequential=True)
    def remember(key: str, value: str) -> str:
        """Saves a fact about the user or the trip to working memory."""
        memory.set_fact(key, value)
        return f"saved {key}"

    return MemoryAgent(agent, memory=memory)


def _script_prompt(n: int) -> str:
    # Past the end the script starts over after the introduction.
    return DEMO_SCRIPT[n if n < len(DEMO_SCRIPT) else 1 + (n - 1) % (len(DEMO_SCRIPT) - 1)][0]


async def _session(
    db: str, chat_model: Model, summary_model: Model, resume: str | None, turns: int
) -> int | tuple[str, tuple[str, int, int]]:
    """Runs the turns: the conversation id and its history digest, or the exit code of a failure."""
    store, memory = _demo_memory(db, summary_model)
    try:
        if resume:
            cid = resume
            stored = memory.conversation.get_turns(cid)
            if not stored:
                raise DemoError(f"no conversation {cid!r} in {db}")
            start = stored[-1].turn_id + 1
            digest = _history_digest(memory, cid)
            saved = memory.store.load_by_key(_DIGEST_NAMESPACE, cid)
            same = saved is not None and saved.content["sha256"] == digest[0]
            print(
                f"  resumed: conversation {cid} after {start} turns; history after reopening the "
                f"database: {digest[1]} messages, {digest[2]} tokens, "
                f"{'identical to' if same else 'DIFFERENT from'} the end of the last session"
            )
        else:
            cid = memory.conversation.new_conversation()
            start = 0
            print(f"  started: conversation {cid}")
        print()

        assistant = _travel_agent(chat_model, memory)
        progress = _Progress(sys.stderr)
        summary = memory.conversation.get_summary(cid)
        estimator = memory.conversation.estimator
        for i in range(turns):
            n = start + i
            prompt = _script_prompt(n)
            progress.show(i, turns, "waiting for the model…")
            try:
                result = await assistant.run(prompt, conversation_id=cid)
            except AgentRunError as exc:
                progress.clear()
                print(
                    f"error: the model failed on turn {n + 1}: {type(exc).__name__}: {exc}",
                    file=sys.stderr,
                )
                return 1
            progress.clear()
            tokens = memory.conversation.get_history_tokens(cid)
            kept = len(memory.conversation.get_turns(cid))
            window = _turns_in(memory.get_message_history(cid))
            print(f"[turn {n + 1:2}] you:   {prompt}")
            for line in _tool_lines(result.new_messages()):
                print(f"          tool:  {line}")
            print(f"          agent: {result.output}")
            print(
                f"          history {_bar(tokens, DEMO_BUDGET)} {tokens:3}/{DEMO_BUDGET} tokens: "
                f"{window} of {n + 1} turns sent whole, {n + 1 - kept} folded into the summary"
            )
            new_summary = memory.conversation.get_summary(cid)
            if new_summary != summary:
                summary = new_summary
                print(f"          summary rolled ({estimator.estimate(summary or '')} tokens):")
                for line in (summary or "").splitlines():
                    print(f"            {line}")
            facts = "; ".join(f"{k}={v}" for k, v in memory.working.items())
            print(f"          facts: {facts or '(none)'}")
        digest = _history_digest(memory, cid)
        _save_digest(memory, cid, digest)
    finally:
        store.close()
    return cid, digest


def run_demo(
    *,
    db: str = DEFAULT_DEMO_DB,
    model: str | None = None,
    resume: str | None = None,
    turns: int = 8,
) -> int:
    """Runs the demo conversation, printing each turn and what memory did with it.

    Args:
        db: The SQLite file the memory lives in (its directory is created).
        model: A pydantic-ai model string; ``None`` runs the offline scripted models.
        resume: The id of a stored conversation to continue.
        turns: How many turns to run.

    Returns:
        The exit status: 0 when the reopened database gives the identical history, 1 when a
        model failed or it differs, 2 for bad arguments.

    Raises:
        DemoError: ``model`` cannot be used here (the message names ``memlane[llm]``), ``db``
            is a directory or cannot be opened, or ``resume`` names no stored conversation.
    """
    if turns <= 0:
        print("error: --turns must be positive", file=sys.stderr)
        return 2
    # The demo owns its terminal: pydantic-ai's first-run banner would land between its lines.
    pydantic_ai.BANNER_ENABLED = False
    chat_model, summary_model, model_note = _choose_models(model)
    if Path(db).is_dir():
        raise DemoError(f"--db {db}: is a directory; give a SQLite file path")
    try:
        Path(db).absolute().parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DemoError(f"--db {db}: cannot create its directory ({exc.strerror})") from None
    print(f"memlane demo: a pydantic-ai agent with memory (backend: {BACKEND})")
    print(f"  model:   {model_note}")
    print(
        f"  memory:  SQLite {db}; history budget {DEMO_BUDGET} tokens, summaries above "
        f"{DEMO_SUMMARIZE_ABOVE} (at most {DEMO_SUMMARY_TOKENS} tokens)"
    )
    try:
        outcome = asyncio.run(_session(db, chat_model, summary_model, resume, turns))
    except StoreError as exc:
        raise DemoError(f"--db {db} cannot be used: {str(exc).splitlines()[0]}") from None
    if isinstance(outcome, int):
        return outcome
    cid, digest = outcome

    # A restart in miniature: reopen the file and rebuild the history from it alone.
    reopened_store, reopened = _demo_memory(db, summary_model)
    try:
        again = _history_digest(reopened, cid)
    finally:
        reopened_store.close()
    print()
    print(
        f"reopened {db}: history {again[1]} messages, {again[2]} tokens; "
        f"{'identical' if again == digest else 'DIFFERENT'} to the one in memory"
    )
    print(
        f"continue after a restart with: python -m memlane demo --resume {cid}"
        + (f" --db {db}" if db != DEFAULT_DEMO_DB else "")
    )
    return 0 if again == digest else 1
