"""The message types of shared memory, as the frameworks users port code from name them.

Any other ``type`` is accepted too (the frameworks' own examples broadcast
``global_observation``); these are the ones views and builders give a meaning to.
"""

from __future__ import annotations

__all__ = [
    "ACTION",
    "ASSISTANT_MESSAGE",
    "CONVERSATION_TYPES",
    "ERROR",
    "FINAL",
    "GLOBAL_OBSERVATION",
    "MESSAGE_TYPES",
    "OBSERVATION",
    "SCRIPT_INSTRUCTION",
    "STRATEGIC_PLAN",
    "SUGGESTED_PLAN",
    "SYNTHESIS",
    "TASK",
    "USER_MESSAGE",
]

USER_MESSAGE = "user_message"
"""What the user said: part of the conversation every worker and orchestrator sees."""
ASSISTANT_MESSAGE = "assistant_message"
"""What the system answered the user: part of the conversation."""
TASK = "task"
"""Work handed to an agent; a worker's current task starts at its newest ``task``."""
ACTION = "action"
"""A tool call an agent made (``tool``, ``args``)."""
OBSERVATION = "observation"
"""What a tool call returned; budgets never separate it from its ``action``."""
ERROR = "error"
"""A failure an agent met."""
FINAL = "final"
"""An agent's result: what a manager sees of its subordinates' work."""
SYNTHESIS = "synthesis"
"""A manager's summary of a phase (``phase_id``)."""
STRATEGIC_PLAN = "strategic_plan"
"""A plan of the whole job."""
SUGGESTED_PLAN = "suggested_plan"
"""A plan proposed for review."""
SCRIPT_INSTRUCTION = "script_instruction"
"""A scripted instruction for an agent."""
GLOBAL_OBSERVATION = "global_observation"
"""An observation broadcast to every agent of a namespace (not built in: an example type)."""

CONVERSATION_TYPES = frozenset({USER_MESSAGE, ASSISTANT_MESSAGE})
"""The types that make up the user conversation, whoever adds them."""

MESSAGE_TYPES = (
    USER_MESSAGE,
    ASSISTANT_MESSAGE,
    TASK,
    ACTION,
    OBSERVATION,
    ERROR,
    FINAL,
    SYNTHESIS,
    STRATEGIC_PLAN,
    SUGGESTED_PLAN,
    SCRIPT_INSTRUCTION,
)
"""Every type memlane's builders make, in the order the issue lists them."""
