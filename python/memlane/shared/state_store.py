""":class:`SharedStateStore`: the process-wide state behind the in-memory shared memories."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from memlane._deprecation import warn_renamed
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

    :meth:`default` is the instance :class:`~memlane.shared.ProcessSharedMemory` uses when
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

    def append_agent_message(self, namespace: str, agent_key: str, message: Message) -> None:
        """Adds ``message`` to the trace of ``agent_key``, whatever its type (its own
        ``agent_key`` is replaced): :meth:`get_agent_messages` lists it.

        Raises:
            TypeError, ValueError: A bad namespace, agent key or message; nothing is written.
        """
        namespace = check_identifier(namespace, "namespace")
        agent_key = check_identifier(agent_key, "agent_key")
        checked = check_message(message)
        checked["agent_key"] = agent_key
        checked.pop("is_global", None)
        self._put(namespace, "agent", agent_key, checked)

    def append_global_message(self, namespace: str, message: Message) -> None:
        """Broadcasts ``message`` to every agent of ``namespace`` (sets ``is_global``):
        :meth:`get_global_messages` lists it.

        Raises:
            TypeError, ValueError: A bad namespace or message; nothing is written.
        """
        checked = check_message(message)
        checked["is_global"] = True
        self.append(namespace, checked)

    def append_conversation_message(self, namespace: str, message: Message) -> None:
        """Adds a ``user_message`` or ``assistant_message`` to the conversation of
        ``namespace``: :meth:`get_conversation_messages` lists it.

        Raises:
            TypeError: ``message`` is not a ``dict``.
            ValueError: A bad namespace or message, or one of another type.
        """
        checked = check_message(message)
        if checked["type"] not in ("user_message", "assistant_message"):
            raise ValueError(
                f"a conversation message is a user_message or assistant_message, "
                f"not {checked['type']!r}"
            )
        checked.pop("is_global", None)
        self.append(namespace, checked)

    # Nothing here waits (a lock held for a dict update), so each twin runs its sync method
    # inline, as the other in-memory message store does.

    async def async_append_agent_message(
        self, namespace: str, agent_key: str, message: Message
    ) -> None:
        """Async :meth:`append_agent_message`."""
        self.append_agent_message(namespace, agent_key, message)

    async def async_append_global_message(self, namespace: str, message: Message) -> None:
        """Async :meth:`append_global_message`."""
        self.append_global_message(namespace, message)

    async def async_append_conversation_message(self, namespace: str, message: Message) -> None:
        """Async :meth:`append_conversation_message`."""
        self.append_conversation_message(namespace, message)

    # ------------------------------------------------------------------ deprecated names

    async def append_agent_msg(self, namespace: str, agent_key: str, msg: Message) -> None:
        """Deprecated: :meth:`append_agent_message` or :meth:`async_append_agent_message`."""
        warn_renamed("SharedStateStore.append_agent_msg", "append_agent_message")
        self.append_agent_message(namespace, agent_key, msg)

    async def list_agent_msgs(self, namespace: str, agent_key: str) -> list[Message]:
        """Deprecated: :meth:`get_agent_messages` or :meth:`async_get_agent_messages`."""
        warn_renamed("SharedStateStore.list_agent_msgs", "get_agent_messages")
        return self.get_agent_messages(namespace, agent_key)

    async def append_global_update(self, namespace: str, update: Message) -> None:
        """Deprecated: :meth:`append_global_message` or :meth:`async_append_global_message`."""
        warn_renamed("SharedStateStore.append_global_update", "append_global_message")
        self.append_global_message(namespace, update)

    async def list_global_updates(self, namespace: str) -> list[Message]:
        """Deprecated: :meth:`get_global_messages` or :meth:`async_get_global_messages`."""
        warn_renamed("SharedStateStore.list_global_updates", "get_global_messages")
        return self.get_global_messages(namespace)

    async def append_conversation_msg(self, namespace: str, msg: Message) -> None:
        """Deprecated: :meth:`append_conversation_message` or its ``async_`` twin."""
        warn_renamed("SharedStateStore.append_conversation_msg", "append_conversation_message")
        self.append_conversation_message(namespace, msg)

    async def list_conversation_msgs(self, namespace: str) -> list[Message]:
        """Deprecated: :meth:`get_conversation_messages` or its ``async_`` twin."""
        warn_renamed("SharedStateStore.list_conversation_msgs", "get_conversation_messages")
        return self.get_conversation_messages(namespace)
