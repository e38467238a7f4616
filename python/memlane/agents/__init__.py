"""pydantic-ai agents with memory: conversations, working memory, delegation, conversation stores.

* :class:`MemoryAgent` (``agent.py``) wraps a :class:`pydantic_ai.Agent`: each run is sent the
  conversation's budgeted history and stored as one turn; the working-memory facts reach the
  model as instructions (``run_inputs.py`` prepares what a run is given). With
  ``long_term=``, what long-term memory holds for its user joins them, the
  ``recall``/``remember`` tools are there, and runs can become episodes (``long_term.py``).
* Every request a :class:`MemoryAgent` or :func:`memory_history` run makes is kept within the
  budget as a whole — instructions, tool definitions, history and the run's own messages —
  by :class:`RequestBudget` (``budget.py``), with counts scaled per model by a
  :class:`Calibration` (``calibration.py``) learnt from the usage providers report.
* :func:`memory_history` (``capability.py``) is the same trimming for an
  :class:`~pydantic_ai.Agent` you run yourself, as a
  :class:`~pydantic_ai.capabilities.ProcessHistory` capability (pydantic-ai 2.x has no
  ``history_processors=``); :func:`store_run` stores such a run.
* :class:`DelegationRouter` (``delegation.py``) hands each prompt to one of several agents, as a
  :class:`DelegationStrategy` chooses; they share the conversation and keep their own facts.
* :func:`memory_tools` (``tools.py``) gives an agent ``recall`` and ``remember`` tools over
  long-term memory.
* :class:`MemlaneConversationStore` (``conversation_store.py``) is pydantic-ai's own
  :class:`~pydantic_ai.conversation_store.ConversationStore` over any memlane store.

Histories are whole turns, so what a model is sent never starts with a tool return whose call
was trimmed away and never holds a call without its return: pydantic-ai would otherwise repair
the history by silently dropping the orphans, and providers reject it outright.
"""

from __future__ import annotations

from memlane.agents.agent import MemoryAgent, MemoryRunResult, MemoryStreamedRun
from memlane.agents.calibration import Calibration
from memlane.agents.capability import async_store_run, memory_history, store_run
from memlane.agents.conversation_store import MemlaneConversationStore
from memlane.agents.delegation import DelegationRouter, DelegationStrategy, RoundRobinStrategy
from memlane.agents.request_budget import RequestBudget, RequestCount, count_request
from memlane.agents.tools import memory_tools

__all__ = [
    "Calibration",
    "DelegationRouter",
    "DelegationStrategy",
    "MemlaneConversationStore",
    "MemoryAgent",
    "MemoryRunResult",
    "MemoryStreamedRun",
    "RequestBudget",
    "RequestCount",
    "RoundRobinStrategy",
    "async_store_run",
    "count_request",
    "memory_history",
    "memory_tools",
    "store_run",
]
