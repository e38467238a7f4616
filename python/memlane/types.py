"""The data memlane stores: :class:`MemoryEntry` and :class:`ConversationTurn` (pydantic v2)."""

from __future__ import annotations

import enum
import functools
import uuid
from collections.abc import Collection, Generator
from datetime import UTC, datetime
from os import urandom
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_serializer,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import (
    CoreSchema,
    PydanticSerializationError,
    core_schema,
    to_json,
    to_jsonable_python,
)

from memlane.message_json import messages_json, turn_text

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

M = TypeVar("M", bound=BaseModel)


def new_entry_id() -> str:
    """A new entry id in ``uuid.uuid4().hex``'s format and distribution: 16 random bytes with
    the version (4) and variant bits set, as hex.

    Half the cost of building a ``UUID`` to read its ``hex`` (every turn on a persistent store
    makes one); a test holds the two to the same form.
    """
    raw = bytearray(urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40
    raw[8] = raw[8] & 0x3F | 0x80
    return raw.hex()


def utc_now() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """An aware UTC datetime; a naive one is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class MemoryScope(str, enum.Enum):
    """Which memory an entry belongs to."""

    CONVERSATION = "conversation"
    WORKING = "working"
    LONG_TERM = "long_term"


class MemoryEntry(BaseModel):
    """One stored item: a working-memory fact, a conversation turn, a summary.

    Attributes:
        entry_id: Unique id (uuid4 hex by default); saving the same id again replaces it.
        scope: Which memory the entry belongs to.
        key: Optional lookup key, unique within a namespace.
        content: The payload; persistent stores require it to be JSON-serialisable.
        metadata: Free-form JSON-serialisable annotations.
        created_at: Creation time, aware UTC.
        expires_at: When the entry stops being returned by any store (``None``: never).
        importance: 0.0–1.0.
        version: The version the store assigned to a keyed entry: 0 after a plain ``save``,
            ``expected_version + 1`` after a winning ``save_if`` (see
            :class:`~memlane.stores.protocol.ConditionalStore`). Set by the store on load and
            ignored on save, so an entry loaded, changed and saved back never carries a stale
            version into the store.
    """

    model_config = ConfigDict(validate_assignment=True)

    entry_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    scope: MemoryScope = MemoryScope.WORKING
    key: str | None = None
    content: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utc_now)
    expires_at: datetime | None = None
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    version: int = Field(default=0, ge=0)

    @field_validator("created_at")
    @classmethod
    def _created_utc(cls, value: datetime) -> datetime:
        return as_utc(value)

    @field_validator("expires_at")
    @classmethod
    def _expires_utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)

    @property
    def is_expired(self) -> bool:
        """Whether ``expires_at`` has passed."""
        return self.expires_at is not None and self.expires_at <= utc_now()


@functools.cache
def _messages_adapter() -> TypeAdapter[list[ModelMessage]]:
    """``list[ModelMessage]`` as a field of a model with the default config would be."""
    from pydantic_ai.messages import ModelMessage

    return TypeAdapter(list[ModelMessage])


def _validate_messages(value: Any, info: ValidationInfo) -> list[ModelMessage]:
    if type(value) is list and not value:
        return []
    adapter = _messages_adapter()
    if info.mode == "json":  # as parsed JSON: validated as the JSON it was (bytes are base64)
        return adapter.validate_json(to_json(value), context=info.context)
    return adapter.validate_python(value, context=info.context)


def _serialize_messages(value: Any, info: SerializationInfo) -> Any:
    if type(value) is list and not value:
        return []
    return _messages_adapter().dump_python(
        value,
        mode="json" if info.mode_is_json() else "python",
        include=cast("Any", info.include),
        exclude=cast("Any", info.exclude),
        context=info.context,
        by_alias=info.by_alias,
        exclude_unset=info.exclude_unset,
        exclude_defaults=info.exclude_defaults,
        exclude_none=info.exclude_none,
        round_trip=info.round_trip,
        serialize_as_any=info.serialize_as_any,
    )


class _LazyMessages:
    """Validates and serialises ``list[ModelMessage]`` with pydantic-ai imported on first use.

    Importing pydantic-ai loads its whole package (~0.5 s), and a turn given as strings never
    needs it: the field is checked by exactly the schema ``list[ModelMessage]`` would have,
    built the first time a turn carries messages.
    """

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.with_info_plain_validator_function(
            _validate_messages,
            serialization=core_schema.plain_serializer_function_ser_schema(
                _serialize_messages, info_arg=True
            ),
        )

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return handler(_messages_adapter().core_schema)


if TYPE_CHECKING:
    Messages = list[ModelMessage]
else:
    Messages = Annotated[list[Any], _LazyMessages()]
"""``list[ModelMessage]``, checked without importing pydantic-ai until a turn has messages."""


class ConversationTurn(BaseModel):
    """One exchange: a user prompt, the assistant's answer and every message between them.

    Attributes:
        turn_id: 0-based position in the conversation.
        user_prompt: What the user said.
        assistant_response: What the assistant answered.
        raw_messages: The pydantic-ai messages of the turn (tool calls and returns included).
            Those of a turn given only as strings are built when first read.
        timestamp: When the turn was added, aware UTC.
        token_estimate: Tokens the turn costs in a model request (all of its message parts).
        metadata: Free-form annotations.
    """

    turn_id: int = Field(ge=0)
    user_prompt: str
    assistant_response: str
    raw_messages: Messages = Field(default_factory=list)
    timestamp: datetime = Field(default_factory=utc_now)
    token_estimate: int = Field(default=0, ge=0)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def pinned(self) -> bool:
        """Whether the turn is pinned (``add_turn(..., pinned=True)`` or ``pin_turn``): never
        summarised away nor trimmed from the prompt. Kept as ``metadata["pinned"]``, so the
        store's log, snapshots and every host keep it."""
        return self.metadata.get("pinned") is True

    # A turn made by new_turn without raw_messages has the two messages built from its
    # strings, made the first time anything reads them (pydantic-ai is imported then): on
    # attribute access, and before anything that reads the fields wholesale.

    def _messages(self) -> None:
        values = self.__dict__
        if "raw_messages" not in values:
            from memlane.messages import default_messages

            messages = default_messages(
                values["user_prompt"], values["assistant_response"], values["timestamp"]
            )
            # A new dict in field order (repr and dumps follow it), swapped in at once.
            order = _FIELD_ORDER
            items = sorted(
                [*values.items(), ("raw_messages", messages)],
                key=lambda item: order.get(item[0], len(order)),
            )
            object.__setattr__(self, "__dict__", dict(items))

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            if name == "raw_messages" and "user_prompt" in self.__dict__:
                self._messages()
                return self.__dict__["raw_messages"]
            return super().__getattr__(name)

    # No return annotation: pydantic would take it for the serialised schema.
    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]  # see above
        self._messages()
        return handler(self)

    def __eq__(self, other: object) -> bool:
        self._messages()
        if isinstance(other, ConversationTurn):
            other._messages()
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]  # unhashable, as BaseModel: __eq__ is redefined

    def __iter__(self) -> Generator[tuple[str, Any], None, None]:
        self._messages()
        yield from super().__iter__()

    def __repr_args__(self) -> Any:
        self._messages()
        return super().__repr_args__()

    def __copy__(self) -> ConversationTurn:
        self._messages()
        return super().__copy__()

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> ConversationTurn:
        self._messages()
        return super().__deepcopy__(memo)

    def __getstate__(self) -> dict[Any, Any]:
        self._messages()
        return super().__getstate__()


def strings_only(turn: ConversationTurn) -> bool:
    """Whether ``turn``'s messages are the two of its strings, not built yet."""
    return "raw_messages" not in turn.__dict__


_ALL_FIELDS = frozenset(ConversationTurn.model_fields)
_FIELD_ORDER = {name: i for i, name in enumerate(ConversationTurn.model_fields)}


def new_turn(**values: Any) -> ConversationTurn:
    """A :class:`ConversationTurn` from already-checked values, without validation.

    What ``ConversationTurn.model_construct`` does, minus its per-field default handling:
    every field is given, and at ~1.5 us instead of ~3.5 us it is a sixth of a heuristic
    turn. A test holds it equal to ``model_construct``. Every field but ``raw_messages`` is
    given: without it, the turn's messages are the two built from its strings, when first
    read.
    """
    return construct_unchecked(ConversationTurn, values, _ALL_FIELDS)


_ENTRY_FIELDS = frozenset(MemoryEntry.model_fields)


def new_entry(**values: Any) -> MemoryEntry:
    """A :class:`MemoryEntry` from already-checked values (every field given), without
    validation: for entries memlane builds from data it has validated itself. A test holds
    it equal to ``MemoryEntry.model_construct``."""
    return construct_unchecked(MemoryEntry, values, _ENTRY_FIELDS)


# pydantic's four slots, set through their descriptors: object.__setattr__ looks each up
# through the type first (~0.2 us of the ~0.6 a model costs to make).
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def construct_unchecked(cls: type[M], values: dict[str, Any], fields: Collection[str]) -> M:
    """An instance of the pydantic model ``cls`` whose ``__dict__`` is ``values``, with
    ``fields`` marked as set: ``model_construct`` without its per-field default handling,
    for values the caller has checked (or memlane wrote itself)."""
    model = object.__new__(cls)
    _set_dict(model, values)
    _set_fields(model, set(fields))
    _set_extra(model, None)
    _set_private(model, None)
    return model


class CheckedJson(dict[str, Any]):
    """A JSON object memlane built only from values already in JSON form, so the stores need
    not walk it for the value rule (no NaN, no non-``str`` keys) again, and encode it with
    pydantic's serialiser. In every other way a ``dict``.

    A turn without metadata is one (see :func:`turn_json`): its fields are strings and
    integers memlane checked, and its messages pydantic's JSON-mode dump. Re-checking and
    encoding one with ``json.dumps`` cost ~22 us of a SQLite turn; pydantic encodes it in ~4.
    """

    __slots__ = ()


class TurnJson(CheckedJson):
    """The :class:`CheckedJson` of a turn, with its JSON text made once: ``text``, which the
    stores write as it is, and ``messages``, the JSON of the turn's messages (the part of the
    text a conversation keeps once the turn leaves the history). Both ``None`` when the text
    could not be made (a lone surrogate): a store then encodes the object itself, and fails as
    for any such value. memlane never changes one after making it.
    """

    __slots__ = ("messages", "text")

    messages: bytes | None
    text: str | None


def turn_json(turn: ConversationTurn) -> dict[str, Any]:
    """``turn.model_dump(mode="json")``, built field by field.

    What a persistent store keeps of every turn. pydantic's model serialiser, wrapped around
    memlane's serialiser of ``raw_messages``, spends about as long again as serialising the
    messages themselves (~20 us a turn); here the messages are serialised once (by
    :func:`~memlane.message_json.messages_json`, pydantic's form built directly for the kinds
    memlane knows), and the other fields cost next to nothing. A test holds the two equal, key
    order included.
    Without metadata (whose values the caller gave) the result is a :class:`TurnJson`: its
    text is made here, the messages' JSON spliced into it, so a store does not encode the
    messages a second time when the conversation keeps their JSON. Once the turn's message
    classes are checked, the object, the messages' text and the turn's text are written in
    one walk by :func:`~memlane.message_json.turn_text` (in Rust where the extension is
    active); anything it does not take for certain takes the path below, which asks pydantic.
    """
    messages = turn.raw_messages  # those of a turn given as strings are built now
    values = turn.__dict__
    metadata = values["metadata"]
    if not metadata:
        timestamp = to_jsonable_python(values["timestamp"])
        written = turn_text(
            messages,
            values["turn_id"],
            values["user_prompt"],
            values["assistant_response"],
            timestamp,
            values["token_estimate"],
        )
        if written is not None:  # the usual turn: its classes checked, its values plain
            made = TurnJson(
                turn_id=values["turn_id"],
                user_prompt=values["user_prompt"],
                assistant_response=values["assistant_response"],
                raw_messages=written[0],
                timestamp=timestamp,
                token_estimate=values["token_estimate"],
                metadata={},
            )
            made.messages = written[1]
            made.text = written[2]
            return made
    raw = [] if type(messages) is list and not messages else messages_json(messages)
    if metadata:
        return {  # the object is built once, not from a dict copied into it
            "turn_id": values["turn_id"],
            "user_prompt": values["user_prompt"],
            "assistant_response": values["assistant_response"],
            "raw_messages": raw,
            "timestamp": to_jsonable_python(values["timestamp"]),
            "token_estimate": values["token_estimate"],
            "metadata": to_jsonable_python(metadata),
        }
    made = TurnJson(
        turn_id=values["turn_id"],
        user_prompt=values["user_prompt"],
        assistant_response=values["assistant_response"],
        raw_messages=raw,
        timestamp=to_jsonable_python(values["timestamp"]),
        token_estimate=values["token_estimate"],
        metadata={},
    )
    try:
        encoded = to_json(raw)
        head = to_json(
            {
                "turn_id": made["turn_id"],
                "user_prompt": made["user_prompt"],
                "assistant_response": made["assistant_response"],
            }
        )
        tail = to_json(
            {
                "timestamp": made["timestamp"],
                "token_estimate": made["token_estimate"],
                "metadata": {},
            }
        )
    except PydanticSerializationError:  # a lone surrogate: the store says so, as before
        made.messages = made.text = None
    else:
        made.messages = encoded
        # Both halves are compact objects: the messages go between them, in field order.
        made.text = (head[:-1] + b',"raw_messages":' + encoded + b"," + tail[1:]).decode()
    return made
