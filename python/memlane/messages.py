"""pydantic-ai messages as memlane sees them: the texts a request carries, the summary message,
and the compact form retained turns are kept in.

pydantic-ai is imported by the functions that build or decode its messages, the first time one
runs, not with this module: importing it loads the whole package (~0.5 s), which a process that
only ever stores strings never needs.
"""

from __future__ import annotations

import functools
import pickle
import threading
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import TypeAdapter
    from pydantic_ai.messages import (
        BaseToolCallPart,
        BaseToolReturnPart,
        ModelMessage,
        ModelRequest,
        RetryFeedbackPart,
        RetryPromptPart,
    )

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
"""Opens the system prompt that carries a rolling summary."""


def _content_texts(content: Any) -> Iterable[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, Sequence):
        for item in content:
            if isinstance(item, str):
                yield item
            elif (url := getattr(item, "url", None)) is not None:
                yield str(url)


@functools.cache
def message_classes() -> frozenset[type]:
    """The classes of pydantic-ai's messages, ``ModelRequest`` and ``ModelResponse``
    (imported once): a turn's messages are checked against them on every turn."""
    from pydantic_ai.messages import ModelRequest, ModelResponse

    return frozenset({ModelRequest, ModelResponse})


@functools.cache
def _part_classes() -> tuple[
    frozenset[type],
    type[BaseToolCallPart[Any]],
    type[BaseToolReturnPart[Any]],
    tuple[type[RetryFeedbackPart], type[RetryPromptPart]],
]:
    """The part classes :func:`message_texts` tells apart, imported once (an import statement
    per call cost ~1 us): those whose text is their ``content``, then tool calls, tool
    returns and retry feedback."""
    from pydantic_ai.messages import (
        BaseToolCallPart,
        BaseToolReturnPart,
        RetryFeedbackPart,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ThinkingPart,
        UserPromptPart,
    )

    return (
        frozenset({TextPart, UserPromptPart, SystemPromptPart, ThinkingPart}),
        BaseToolCallPart,
        BaseToolReturnPart,
        (RetryFeedbackPart, RetryPromptPart),
    )


def message_texts(messages: Iterable[ModelMessage]) -> list[str]:
    """Every piece of text a model is sent for these messages.

    Prompts, system prompts, text, thinking, tool-call names and arguments, tool returns and
    retry feedback all count: a turn's estimate must cover what the request will carry.
    """
    plain, calls, returns, retries = _part_classes()
    texts: list[str] = []
    for message in messages:
        for part in message.parts:
            # Text, prompts and thinking with a str content: every turn's parts, one test.
            if type(part) in plain and type(content := part.content) is str:  # type: ignore[union-attr]  # every class in plain has a content
                texts.append(content)
            elif isinstance(part, calls):
                texts.append(part.tool_name)
                texts.append(part.args_as_json_str())
            elif isinstance(part, returns):
                texts.append(part.tool_name)
                texts.append(part.model_response_str())
            elif isinstance(part, retries) and not isinstance(part.content, str):
                texts.append(part.model_response())  # retry feedback with validation errors
            else:
                texts.extend(_content_texts(getattr(part, "content", None)))
    return texts


def summary_message(summary: str, created_at: datetime) -> ModelRequest:
    """The message that carries a rolling summary at the head of the history.

    Its timestamp is the summary's own, so the same history compares equal however often
    (and in whichever process) it is rebuilt.
    """
    from pydantic_ai.messages import ModelRequest, SystemPromptPart

    return ModelRequest(
        parts=[SystemPromptPart(content=SUMMARY_PREFIX + summary, timestamp=created_at)]
    )


_Made = tuple[type, dict[str, Any]]
"""A class and the attributes its constructor gave an instance."""


@functools.cache
def _turn_templates() -> tuple[_Made, _Made, _Made, _Made, _Made] | None:
    """What the constructors make of a turn's two messages, their parts and the response's
    usage: the classes and their attributes (content and timestamps to be replaced).

    :func:`default_messages` copies these instead of calling the constructors, whose
    ``__init__`` and ``__post_init__`` checks were two thirds of building the messages. Only
    attributes that are immutable can be shared by copying, so ``None`` (build them with the
    constructors) if a version of pydantic-ai gives one a mutable default other than the
    parts and the usage, which are made anew each time.
    """
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
    from pydantic_ai.usage import RequestUsage

    at = datetime(2000, 1, 1)  # noqa: DTZ001  # replaced in every copy
    request = ModelRequest(parts=[UserPromptPart(content="", timestamp=at)])
    response = ModelResponse(parts=[TextPart(content="")], timestamp=at)
    made = [request, request.parts[0], response, response.parts[0], response.usage]
    if type(response.usage) is not RequestUsage or response.usage.details != {}:
        return None
    for item in made:
        for name, value in vars(item).items():
            if type(value) not in _ATOMS and name not in ("parts", "usage", "details"):
                return None
    templates = [(type(item), dict(vars(item))) for item in made]
    return templates[0], templates[1], templates[2], templates[3], templates[4]


def default_messages(user_prompt: str, assistant_response: str, at: datetime) -> list[ModelMessage]:
    """The two messages of a turn given only as strings.

    Timestamps are the turn's, so rebuilding them later yields equal messages.
    """
    templates = _turn_templates()
    if templates is None:
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        return [
            ModelRequest(parts=[UserPromptPart(content=user_prompt, timestamp=at)]),
            ModelResponse(parts=[TextPart(content=assistant_response)], timestamp=at),
        ]
    # Item assignment into each copied __dict__: a call with keywords per object cost more
    # than the constructors saved.
    request, prompt, response, text, usage = templates
    new = object.__new__
    prompt_part: Any = new(prompt[0])
    values = prompt_part.__dict__
    values.update(prompt[1])
    values["content"] = user_prompt
    values["timestamp"] = at
    asked: Any = new(request[0])
    values = asked.__dict__
    values.update(request[1])
    values["parts"] = [prompt_part]
    text_part: Any = new(text[0])
    values = text_part.__dict__
    values.update(text[1])
    values["content"] = assistant_response
    used: Any = new(usage[0])
    values = used.__dict__
    values.update(usage[1])
    values["details"] = {}
    answered: Any = new(response[0])
    values = answered.__dict__
    values.update(response[1])
    values["parts"] = [text_part]
    values["usage"] = used
    values["timestamp"] = at
    return [asked, answered]


Frozen = tuple[Any, ...]
"""Messages frozen by :func:`freeze_messages`: one flat tuple of plain values (see there), or
their pickle in a 1-tuple. Either tells it from JSON."""

_ATOMS = frozenset({str, int, float, bool, type(None), bytes, datetime})
"""Values a frozen form keeps as they are: immutable, and never tracked by the collector."""

_LIST, _DICT, _TUPLE = -1, -2, -3
"""Codes of the containers in a frozen form; an object's code is its shape's index (>= 0)."""

_shapes: list[tuple[type, tuple[str, ...]]] = []
"""The (class, attribute names) of every object shape frozen so far: a frozen object holds
its shape's index, an ``int``, so the frozen form holds no class. Appended only, so an index
never changes."""
_shape_ids: dict[tuple[type, tuple[str, ...]], int] = {}
_shapes_lock = threading.Lock()


def _new_shape(shape: tuple[type, tuple[str, ...]]) -> int:
    """The index of a shape not seen yet (or seen by another thread meanwhile)."""
    with _shapes_lock:  # two threads must not read each other's index as their own
        index = _shape_ids.get(shape)
        if index is None:
            _shapes.append(shape)
            index = _shape_ids[shape] = len(_shapes) - 1
        return index


_plain_classes: dict[type, bool] = {}

_PICKLING = ("__new__", "__reduce_ex__", "__reduce__", "__getstate__")


def _plain(cls: type) -> bool:
    """Whether unpickling an instance of ``cls`` would only refill its ``__dict__``: a
    dataclass (pydantic-ai's messages, parts and usage are) that customises none of it."""
    return (
        hasattr(cls, "__dataclass_fields__")
        and all(getattr(cls, name) is getattr(object, name) for name in _PICKLING)
        and not hasattr(cls, "__setstate__")
        and "__dict__" in dir(cls)
    )


class _Unfreezable(Exception):  # a signal inside freeze_messages, never raised out
    """A value the frozen form cannot hold as it is."""


_NODE: Any = ...
"""Stands in a frozen object's attribute values for a nested object, whose own values come
before them (see :func:`_flatten`). Ellipsis cannot be a value there (it is no atom: one would
make the messages unfreezable), and it survives a pickle as itself, which a retained turn packed
with others (:mod:`memlane.conversation.retained_turns`) needs: a sentinel object would come
back as a copy."""


def _flatten(value: Any, marks: list[int], values: list[Any]) -> Any:
    """Appends ``value`` (a container or a plain object) to a frozen form, in post-order, and
    returns :data:`_NODE` for the caller's own values.

    Its nested objects come first, each flattened the same way; then ``marks`` gets its code
    (and its length, for a container) and how many nested objects it has, and ``values``
    its items with :data:`_NODE` in their places. Atoms are tested inline: most attributes
    are atoms, and a call per attribute was half the cost.
    """
    cls = type(value)
    atoms = _ATOMS
    before = len(marks)
    if cls is list or cls is tuple:
        code = _LIST if cls is list else _TUPLE
        items = [item if type(item) in atoms else _flatten(item, marks, values) for item in value]
    elif cls is dict:
        code = _DICT
        items = [
            item if type(item) in atoms else _flatten(item, marks, values)
            for pair in value.items()
            for item in pair
        ]
    else:
        plain = _plain_classes.get(cls)
        if plain is None:
            plain = _plain_classes[cls] = _plain(cls)
        if not plain:
            raise _Unfreezable
        fields = value.__dict__
        shape = (cls, tuple(fields))
        code = _shape_ids.get(shape, -4)
        if code < 0:
            code = _new_shape(shape)
        items = [
            item if type(item) in atoms else _flatten(item, marks, values)
            for item in fields.values()
        ]
    # Items are atoms or _NODE, and no atom equals Ellipsis: count() finds exactly the nodes.
    nested = 0 if len(marks) == before else items.count(_NODE)
    if code >= 0:
        marks += (code, nested)
    else:
        marks += (code, len(items), nested)
    values += items
    return _NODE


def _thawed(frozen: Frozen) -> list[ModelMessage]:
    """The messages :func:`_flatten` froze, as new objects."""
    count = frozen[0]
    marks, values = frozen[1 : count + 1], frozen[count + 1 :]
    done: list[Any] = []  # finished objects whose parent comes later
    at = read = 0
    while at < count:
        code = marks[at]
        if code >= 0:
            cls, names = _shapes[code]
            size = len(names)
            at += 1
        else:
            size = marks[at + 1]
            at += 2
        nested = marks[at]
        at += 1
        items = values[read : read + size]
        read += size
        if nested:
            kids = iter(done[-nested:])
            del done[-nested:]
            items = tuple([next(kids) if item is _NODE else item for item in items])
        if code >= 0:
            made: Any = object.__new__(cls)
            made.__dict__.update(zip(names, items, strict=True))
            done.append(made)
        elif code == _LIST:
            done.append(list(items))
        elif code == _DICT:
            done.append(dict(zip(items[::2], items[1::2], strict=True)))
        else:
            done.append(items)
    messages: list[ModelMessage] = done[0]
    return messages


def freeze_messages(messages: list[ModelMessage]) -> Frozen | list[ModelMessage]:
    """Messages as one flat immutable tuple of plain values, or the list itself if they
    cannot be.

    The compact form of a turn that has left the history. The live messages are a dozen
    objects per turn that Python's cyclic garbage collector tracks. This form is a single
    tuple of strings, numbers and datetimes — how many marks, the marks (each object's shape,
    a class and its attribute names, by index; each container's length), then the values,
    objects in post-order — which the collector stops tracking the first time it looks at it
    (nested tuples took a collection per level). It shares the strings of the live objects
    instead of holding the texts a second time as a pickle does, costs less than pickling,
    and thaws into equal objects the way unpickling does (attributes refilled, no
    ``__init__`` run). Messages holding anything else (a class of their own that customises
    pickling, a set) are pickled: they never leave the process, so pickle is safe here; and
    if even that fails they stay live.
    """
    marks: list[int] = []
    values: list[Any] = []
    try:
        _flatten(messages, marks, values)
        return (len(marks), *marks, *values)
    except (_Unfreezable, RecursionError):
        pass
    try:
        return (pickle.dumps(messages, pickle.HIGHEST_PROTOCOL),)
    except Exception:  # noqa: BLE001  # whatever a message's content raises: keep it live
        return messages


def unpack_messages(payload: bytes | str | Frozen | list[ModelMessage]) -> list[ModelMessage]:
    """The messages of a turn's record: its JSON (a turn read back from the store) or what
    :func:`freeze_messages` froze, as new objects; a list of live messages as a new list of
    the same objects."""
    if isinstance(payload, tuple):
        if type(payload[0]) is bytes:
            pickled: list[ModelMessage] = pickle.loads(payload[0])  # noqa: S301  # made in-process
            return pickled
        return _thawed(payload)
    if isinstance(payload, bytes | str):
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        decoded: list[ModelMessage] = ModelMessagesTypeAdapter.validate_json(payload)
        return decoded
    return list(payload)


def messages_adapter() -> TypeAdapter[list[ModelMessage]]:
    """pydantic-ai's ``ModelMessagesTypeAdapter`` (imported on first use)."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    return ModelMessagesTypeAdapter
