"""Messages and entries: what an append carries and what a read of entries gives back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar

from pydantic import ConfigDict, Discriminator, Field, Tag

from om_api.schemas.base import MAX_BATCH_ENTRIES, EntryId, RequestModel, Role, WireModel


class ToolCallWire(RequestModel):
    """A tool call an assistant message asks for (unknown keys refused)."""

    id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=256)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ContentPartWire(RequestModel):
    """One part of a multi-part message: ``text`` parts carry ``text``, others ``data``
    (unknown keys refused)."""

    type: str = Field(min_length=1, max_length=64)
    text: str | None = None
    data: dict[str, Any] | None = None


def _content_form(value: Any) -> str:
    # One branch per input, so a bad part is one error (``content.parts[0].txt``), not a
    # second "should be a valid string" for the other branch.
    return "text" if isinstance(value, str) else "parts"


ContentIn = Annotated[
    Annotated[str, Tag("text")] | Annotated[Sequence[ContentPartWire], Tag("parts")],
    Discriminator(_content_form),
]


class MessageWire(RequestModel):
    """A chat message to append; unknown keys (``contnet`` ...) are refused here too.

    Responses carry the same shape as :class:`MessageOut`, a subclass that ignores unknown
    keys, so a message read back can be appended again as it is.
    """

    role: Role
    content: ContentIn = ""
    tool_calls: Sequence[ToolCallWire] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False


class ToolCallOut(ToolCallWire):
    """A tool call as stored (response: unknown keys ignored)."""

    model_config = ConfigDict(extra="ignore")
    _checks_storable: ClassVar[bool] = False


class ContentPartOut(ContentPartWire):
    """A content part as stored (response: unknown keys ignored)."""

    model_config = ConfigDict(extra="ignore")
    _checks_storable: ClassVar[bool] = False


ContentOut = Annotated[
    Annotated[str, Tag("text")] | Annotated[Sequence[ContentPartOut], Tag("parts")],
    Discriminator(_content_form),
]


class MessageOut(MessageWire):
    """A chat message as stored (response: unknown keys ignored)."""

    model_config = ConfigDict(extra="ignore")
    _checks_storable: ClassVar[bool] = False

    content: ContentOut = ""
    tool_calls: Sequence[ToolCallOut] = Field(default_factory=list)


class EntryIn(RequestModel):
    """One entry to append.

    ``id`` defaults to a fresh random id; send your own to make retries idempotent.
    ``parent_id`` defaults to the previous entry (the first: the session's leaf). ``kind`` is
    ``message`` (needs ``message``), ``custom`` (needs ``data``), ``compaction`` (needs
    ``summary``) or another bookkeeping kind.
    """

    id: EntryId | None = None
    parent_id: EntryId | None = None
    kind: str = Field(min_length=1, max_length=64, examples=["message"])
    message: MessageWire | None = None
    data: dict[str, Any] | None = None
    summary: str | None = None


class EntryOut(WireModel):
    """An entry as stored (``parent_id`` and ``created_at`` filled in)."""

    id: str
    session_id: str
    parent_id: str | None = None
    kind: str
    created_at: str | None = None
    message: MessageOut | None = None
    data: dict[str, Any] | None = None
    summary: str | None = None


class AppendEntriesRequest(RequestModel):
    """``POST /v1/sessions/{sid}/entries``: 1 to 1,000 entries, appended atomically in order."""

    entries: list[EntryIn] = Field(min_length=1, max_length=MAX_BATCH_ENTRIES)


class AppendEntriesResponse(WireModel):
    """What an append did: ``appended_ids`` were written now, ``duplicate_ids`` were already
    stored with the same content (a retried append) and were not written again."""

    appended_ids: list[str]
    duplicate_ids: list[str]
    leaf_id: str | None


class EntriesPage(WireModel):
    """Current-branch entries in order; pass ``next_cursor`` as ``after`` for the next page
    (``None`` on the last page)."""

    entries: list[EntryOut]
    next_cursor: str | None
