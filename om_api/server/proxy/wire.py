"""Chat-completions messages as the core's :class:`~om_core.ledger.models.Message`, and the
entry ids the proxy gives them.

An id is a chain: the hash of the previous message's id and this message's canonical form, so
the same history always yields the same ids (a retried request appends nothing twice) and an id
names the whole conversation up to its message (a history that matches the stored one up to an
id matches it everywhere before). System and developer messages are instructions the client
sends on every turn: they are forwarded, never recorded, and take no place in the chain.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from om_core.errors import InvalidInputError
from om_core.ledger.models import ContentPart, Message, Role, ToolCall

ID_PREFIX: Final = "px-"
INSTRUCTION_ROLES: Final = frozenset({"system", "developer"})
_RECORDED_ROLES: Final[dict[str, Role]] = {"user": "user", "assistant": "assistant", "tool": "tool"}


class ProxyInputError(InvalidInputError):
    """A chat-completions body the proxy cannot read (answered 422 with the reason)."""


class _FunctionWire(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, max_length=256)
    arguments: str | dict[str, Any] = "{}"


class _ToolCallWire(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1, max_length=256)
    type: str = "function"
    function: _FunctionWire


class ChatMessageWire(BaseModel):
    """One message of a chat-completions request, as far as the proxy reads it (other keys
    pass through untouched)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[_ToolCallWire] | None = None
    tool_call_id: str | None = Field(default=None, max_length=256)
    name: str | None = None


@dataclass(frozen=True)
class ReadMessages:
    """A request's messages: the raw ones (forwarded as sent), which of them are recorded
    (``recorded[k]`` is the index in ``raw`` of the k-th non-instruction message), their core
    form and their chain ids."""

    raw: tuple[dict[str, Any], ...]
    recorded: tuple[int, ...]
    messages: tuple[Message, ...]
    ids: tuple[str, ...]


def read_messages(raw: Sequence[Any], tenant_id: str, session_id: str) -> ReadMessages:
    """Validate ``raw`` (the body's ``messages``) and give each recorded one its chain id.

    Raises :class:`ProxyInputError` naming the first message that is not a chat message.
    """
    plain: list[dict[str, Any]] = []
    recorded: list[int] = []
    messages: list[Message] = []
    for index, item in enumerate(raw):
        try:
            wire = ChatMessageWire.model_validate(item)
        except ValidationError as exc:
            reason = exc.errors()[0]
            where = ".".join(str(p) for p in reason["loc"])
            raise ProxyInputError(f"messages[{index}].{where}: {reason['msg']}") from None
        plain.append(item)
        if wire.role not in INSTRUCTION_ROLES:
            recorded.append(index)
            messages.append(to_message(wire))
    root = _root(tenant_id, session_id)
    return ReadMessages(
        raw=tuple(plain),
        recorded=tuple(recorded),
        messages=tuple(messages),
        ids=tuple(chain_ids(root, messages)),
    )


def _root(tenant_id: str, session_id: str) -> str:
    # Entry ids are unique across sessions: the chain starts from the tenant and session.
    return hashlib.sha256(f"{tenant_id}\0{session_id}".encode()).hexdigest()


def chain_ids(previous: str, messages: Sequence[Message]) -> list[str]:
    """The chain id of each message after the one whose id (or root) is ``previous``."""
    ids: list[str] = []
    for message in messages:
        canonical = json.dumps(message.to_json_dict(), sort_keys=True, ensure_ascii=False)
        digest = hashlib.sha256(f"{previous}\0{canonical}".encode()).hexdigest()
        previous = f"{ID_PREFIX}{digest[:40]}"
        ids.append(previous)
    return ids


def next_id(ids: Sequence[str], tenant_id: str, session_id: str, message: Message) -> str:
    """The chain id of ``message`` following the messages named by ``ids``."""
    previous = ids[-1] if ids else _root(tenant_id, session_id)
    return chain_ids(previous, [message])[0]


def to_message(wire: ChatMessageWire) -> Message:
    """The core message of a chat message (user, assistant or tool)."""
    calls = tuple(
        ToolCall(id=c.id, name=c.function.name, arguments=tool_arguments(c.function.arguments))
        for c in wire.tool_calls or ()
    )
    role = _RECORDED_ROLES.get(wire.role)
    if role is None:
        raise ProxyInputError(f"a {wire.role} message is forwarded, never recorded")
    return Message(
        role=role,
        content=_content(wire.content),
        tool_calls=calls,
        tool_call_id=wire.tool_call_id if wire.role == "tool" else None,
        tool_name=wire.name if wire.role == "tool" else None,
    )


def tool_arguments(raw: str | dict[str, Any]) -> dict[str, Any]:
    """Tool-call arguments as an object: the JSON string parsed; anything that is not a JSON
    object is kept whole under ``arguments``."""
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": raw}


def _content(content: str | list[dict[str, Any]] | None) -> str | tuple[ContentPart, ...]:
    if content is None or isinstance(content, str):
        return content or ""
    parts: list[ContentPart] = []
    for part in content:
        kind = str(part.get("type") or "text")
        text = part.get("text") if kind == "text" else None
        if isinstance(text, str):
            parts.append(ContentPart(type="text", text=text))
        else:
            data = {k: v for k, v in part.items() if k != "type"}
            parts.append(ContentPart(type=kind, data=data))
    return tuple(parts)
