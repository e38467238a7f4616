""":class:`SharedStateStore`: the process-wide state behind the in-memory shared memories."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from memlane._validate import check_identifier
from memlane.shared.message_builder import check_message
from memlane.shared.message_store import InMemoryMessageStore

__all__ = ["SharedStateStore"]

Message = dict[str, Any]


class SharedStateStore(InMemoryMessageStore):
    """Every namespace's feeds in this process: agent traces, broadcasts, the conversation.

    Async-safe and thread-safe: each change happens under a lock that is never held across
    an ``await``, so hundreds of coroutines (of any event loop) and threads appending at once
    lose and duplicate nothing, and each agent's messages keep the order they were added in.
    A namespace is a location of :class:`~memlane.shared.InMemoryMessageStore`, so a memory
    that reads message stores reads this one too.

    :meth:`default` is the instance :class:`~memlane.shared.SharedInMemoryMemory` uses when
    given none: agents that name the same namespace in one process share its feeds.
    """

    _default: ClassVar[SharedStateStore | None] = None
    _default_guard: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def default(cls) -> SharedStateStore:
        """The process-wide instance (made on first use)."""
        with cls._default_guard:
            if cls._default is None:
                cls._default = cls()
            return cls._default

    async def append_agent_msg(self, namespace: str, agent_key: str, msg: Message) -> None:
        """Adds ``msg`` to the trace of ``agent_key``, whatever its type (its own
        ``agent_key`` is replaced): :meth:`list_agent_msgs` lists it.

        Raises:
            TypeError, ValueError: A bad namespace, agent key or message; nothing is written.
        """
        namespace = check_identifier(namespace, "namespace")
        agent_key = check_identifier(agent_key, "agent_key")
        checked = check_message(msg)
        checked["agent_key"] = agent_key
        checked.pop("is_global", None)
        self._put(namespace, "agent", agent_key, checked)

    async def list_agent_msgs(self, namespace: str, agent_key: str) -> list[Message]:
        """The trace of ``agent_key`` in ``namespace``, oldest first."""
        return self.get_agent_messages(namespace, agent_key)

    async def append_global_update(self, namespace: str, update: Message) -> None:
        """Broadcasts ``update`` to every agent of ``namespace`` (sets ``is_global``).

        Raises:
            TypeError, ValueError: A bad namespace or message; nothing is written.
        """
        checked = check_message(update)
        checked["is_global"] = True
        self.append(namespace, checked)

    async def list_global_updates(self, namespace: str) -> list[Message]:
        """The broadcasts of ``namespace``, oldest first."""
        return self.get_global_messages(namespace)

    async def append_conversation_msg(self, namespace: str, msg: Message) -> None:
        """Adds a ``user_message`` or ``assistant_message`` to the conversation of ``namespace``.

        Raises:
            TypeError: ``msg`` is not a ``dict``.
            ValueError: A bad namespace or message, or one of another type.
        """
        checked = check_message(msg)
        if checked["type"] not in ("user_message", "assistant_message"):
            raise ValueError(
                f"a conversation message is a user_message or assistant_message, "
                f"not {checked['type']!r}"
            )
        checked.pop("is_global", None)
        self.append(namespace, checked)

    async def list_conversation_msgs(self, namespace: str) -> list[Message]:
        """The conversation of ``namespace``, oldest first."""
        return self.get_conversation_messages(namespace)
