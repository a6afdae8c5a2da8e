"""Frozen models of the ledger's wire format.

JSON keys are camelCase (``sessionId``, ``sourceEntryIds``, ``coversUpToId`` ...),
Python attributes are snake_case; both spellings are accepted on input, and
``model_dump(by_alias=True)`` writes what the TypeScript package writes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Annotated, Any, Final, Literal, Self, TypeVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from om_core.ledger.ids import MEMORY_ID_PATTERN
from om_core.ledger.sizes import message_tokens

Role = Literal["user", "assistant", "tool", "system"]
ELIGIBLE_ROLES: frozenset[str] = frozenset({"user", "assistant", "tool"})

OBSERVATIONS_RECORDED: Final = "om.observations.recorded"
REFLECTIONS_RECORDED: Final = "om.reflections.recorded"
OBSERVATIONS_DROPPED: Final = "om.observations.dropped"
FOLDED: Final = "om.folded"


class Frozen(BaseModel):
    """Base of every core model: immutable, camelCase on the wire, strict about unknown keys."""

    model_config = ConfigDict(
        frozen=True,
        populate_by_name=True,
        alias_generator=to_camel,
        extra="forbid",
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, ``None`` fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy whose kept values (every ``cached_property``) are computed again: a plain
        copy would keep those of the model it was copied from."""
        copy = super().model_copy(update=update, deep=deep)
        for name in _kept_names(type(self)):
            copy.__dict__.pop(name, None)
        return copy


@functools.cache
def _kept_names(model: type[Frozen]) -> tuple[str, ...]:
    """The names of ``model``'s cached properties, its bases' included."""
    return tuple(
        name
        for cls in model.__mro__
        for name, value in vars(cls).items()
        if isinstance(value, cached_property)
    )


# Checked by pydantic's own (Rust) pattern matcher: a Python validator per id made parsing a
# 10,000-observation ledger three times slower.
MemoryId = Annotated[str, StringConstraints(pattern=MEMORY_ID_PATTERN.pattern)]


class ToolCall(Frozen):
    """One call an assistant message asks for; ``arguments`` is a JSON object."""

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ContentPart(Frozen):
    """A part of a multi-part message: ``text`` parts carry text, others (images ...) data."""

    type: str = Field(min_length=1)
    text: str | None = None
    data: dict[str, Any] | None = None


class Message(Frozen):
    """A chat message: text or parts, with tool calls (assistant) or a tool-call id (tool)."""

    role: Role
    content: str | tuple[ContentPart, ...] = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False

    @property
    def text(self) -> str:
        """The message's text: the string content, or its text parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if p.text is not None)

    # A context read renders and counts every unobserved message of a session's tail, and the
    # tail's messages are the same objects from one read to the next (the store keeps them
    # parsed): each is rendered and counted once.

    @cached_property
    def rendered(self) -> str:
        """The message as plain text: a role tag, its text, and its tool calls (one line
        each). See :func:`om_core.read.window.render_message`."""
        if self.role == "tool":
            tag = f"[tool {self.tool_name or ''} {self.tool_call_id or ''}".rstrip() + "]"
            if self.is_error:
                tag += " (error)"
        else:
            tag = f"[{self.role}]"
        lines = [f"{tag} {self.text}".rstrip()]
        for call in self.tool_calls:
            arguments = json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))
            lines.append(f"  -> tool call {call.name} {arguments} (id {call.id})")
        return "\n".join(lines)

    def rendered_as(self, key: tuple[str, ...], transform: Callable[[str], str]) -> str:
        """``transform(rendered)``, kept for the last ``key`` asked (``transform`` must be a
        function of ``key`` alone: a render redacts with the same secrets, read after read)."""
        kept = self.__dict__.get(_TRANSFORMED)
        if kept is not None and kept[0] == key:
            return cast(str, kept[1])
        text = transform(self.rendered)
        self.__dict__[_TRANSFORMED] = (key, text)
        return text

    @cached_property
    def estimated_tokens(self) -> int:
        """Estimated tokens (see :func:`om_core.ledger.tokens.estimate_message_tokens`)."""
        calls = ((call.name, call.arguments) for call in self.tool_calls)
        return message_tokens(self.text, calls, self.tool_name)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy whose rendering, token count and redacted rendering are computed again."""
        copy = super().model_copy(update=update, deep=deep)
        copy.__dict__.pop(_TRANSFORMED, None)
        return copy


_TRANSFORMED = "_rendered_as"
_R = TypeVar("_R", bound=Frozen)


class SessionEntry(Frozen):
    """One node of a session's entry tree.

    ``kind`` is ``message`` (with ``message``), ``custom`` (with ``data``; memory records are
    custom entries whose ``data.type`` is an ``om.*`` marker), ``compaction`` (with ``summary``
    and ``data``) or any other bookkeeping kind the host uses.
    """

    id: str = Field(min_length=1, max_length=256)
    session_id: str = Field(min_length=1, max_length=256)
    parent_id: str | None = None
    kind: str = Field(min_length=1, max_length=64)
    created_at: str | None = None
    message: Message | None = None
    data: dict[str, Any] | None = None
    summary: str | None = None

    @model_validator(mode="after")
    def _check_kind_payload(self) -> SessionEntry:
        if self.kind == "message" and self.message is None:
            raise ValueError("a message entry needs a message")
        if self.kind != "message" and self.message is not None:
            raise ValueError(f"a {self.kind} entry cannot carry a message")
        if self.kind == "custom" and self.data is None:
            raise ValueError("a custom entry needs data")
        if self.kind == "compaction" and self.summary is None:
            raise ValueError("a compaction entry needs a summary")
        return self

    @cached_property
    def is_eligible_observation_source(self) -> bool:
        """Whether an observer may read and cite it: a message of role user, assistant or
        tool. Kept per entry object: a context read asks it of every entry of the session's
        tail, read after read."""
        return (
            self.kind == "message"
            and self.message is not None
            and (self.message.role in ELIGIBLE_ROLES)
        )

    @property
    def record_type(self) -> str | None:
        """``data.type`` of a custom entry, else ``None``."""
        if self.kind != "custom" or self.data is None:
            return None
        value = self.data.get("type")
        return value if isinstance(value, str) else None

    def record(self, models: Mapping[str, type[_R]]) -> _R | None:
        """The record this entry carries when its :attr:`record_type` is one of ``models``
        (keyed by record type) and its data validates as that model, else ``None``: a
        malformed payload is no record at all."""
        record_type = self.record_type
        model = models.get(record_type) if record_type else None
        if model is None or self.data is None:
            return None
        try:
            return model.model_validate(self.data)
        except ValidationError:
            return None


class Observation(Frozen):
    """A source-backed fact; ``relevance`` (0..1) orders lowest-relevance dropping."""

    id: MemoryId
    text: str = Field(min_length=1)
    source_entry_ids: tuple[str, ...] = Field(min_length=1)
    relevance: float = Field(default=0.5, ge=0.0, le=1.0)
    observed_at: str | None = None


class Reflection(Frozen):
    """A higher-level summary resting on known observation ids."""

    id: MemoryId
    text: str = Field(min_length=1)
    observation_ids: tuple[MemoryId, ...] = Field(min_length=1)
    reflected_at: str | None = None


class ObservationsRecorded(Frozen):
    """Payload of ``om.observations.recorded``; coverage advances even with no observations."""

    type: Literal["om.observations.recorded"] = OBSERVATIONS_RECORDED
    observations: tuple[Observation, ...] = ()
    covers_up_to_id: str | None = None


class ReflectionsRecorded(Frozen):
    """Payload of ``om.reflections.recorded``."""

    type: Literal["om.reflections.recorded"] = REFLECTIONS_RECORDED
    reflections: tuple[Reflection, ...] = ()
    covers_up_to_id: str | None = None


class ObservationsDropped(Frozen):
    """Payload of ``om.observations.dropped``; revocation drops carry no ``coversUpToId``."""

    type: Literal["om.observations.dropped"] = OBSERVATIONS_DROPPED
    observation_ids: tuple[MemoryId, ...] = Field(min_length=1)
    covers_up_to_id: str | None = None


class FoldedMemory(Frozen):
    """Compaction ``data.memory``: a snapshot of the ledger at the compaction point.

    The wire format's keys (``fullFold``, ``observations``, ``reflections``,
    ``droppedObservationIds``) plus the coverage state this package needs to resume a fold
    from the snapshot alone. A snapshot without those keys (written elsewhere) is still read
    for rendering, but a fold does not start from it.
    """

    type: Literal["om.folded"] = FOLDED
    version: Literal[1] = 1
    full_fold: bool = False
    observations: tuple[Observation, ...] = ()
    reflections: tuple[Reflection, ...] = ()
    dropped_observation_ids: tuple[str, ...] = ()
    observation_covers_up_to_id: str | None = None
    reflection_covers_up_to_id: str | None = None
    pending_reflection_observation_ids: tuple[str, ...] | None = None

    @property
    def resumable(self) -> bool:
        """True when the snapshot carries the coverage state a fold resumes from."""
        return self.pending_reflection_observation_ids is not None


class CompactionEntry(Frozen):
    """``data`` of a compaction entry written by the observational-memory strategy."""

    through_entry_id: str | None = None
    keep_entry_ids: tuple[str, ...]
    strategy: str = "observational-memory"
    trigger: str = "manual"
    memory: FoldedMemory


class ObservationalMemoryLedger(Frozen):
    """The folded memory of one branch.

    ``observations`` holds every recorded observation in record order (dropped ones too: the
    full ledger stays for audit and recall); ``dropped_observation_ids`` says which are inactive.
    ``pending_reflection_observation_ids`` are the observations recorded after the last
    ``om.reflections.recorded`` entry, the reflector's next window.
    """

    observations: tuple[Observation, ...] = ()
    reflections: tuple[Reflection, ...] = ()
    dropped_observation_ids: tuple[str, ...] = ()
    observation_covers_up_to_id: str | None = None
    reflection_covers_up_to_id: str | None = None
    pending_reflection_observation_ids: tuple[str, ...] = ()

    @cached_property
    def observations_by_id(self) -> dict[str, Observation]:
        return {o.id: o for o in self.observations}

    @cached_property
    def reflections_by_id(self) -> dict[str, Reflection]:
        return {r.id: r for r in self.reflections}

    @cached_property
    def dropped(self) -> frozenset[str]:
        return frozenset(self.dropped_observation_ids)

    @property
    def active_observations(self) -> tuple[Observation, ...]:
        """Recorded observations that were not dropped, in record order."""
        dropped = self.dropped
        return tuple(o for o in self.observations if o.id not in dropped)


class ContextBlock(Frozen):
    """A block of provider context: ``observational-memory`` or ``recent-messages``."""

    id: str
    text: str
    entry_ids: tuple[str, ...] = ()
