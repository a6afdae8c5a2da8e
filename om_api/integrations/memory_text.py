"""How the API's answers read as text for a model: one line for a failure, a recalled memory
with its source messages, a page of search hits and of entries. The MCP tools and the
framework adapters' memory tools answer with these, so a model reads the same text whichever
way it reaches the memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Final

from om_api.client import (
    Conflict,
    InvalidRequest,
    NotFound,
    OMClientError,
    PayloadTooLarge,
    RateLimited,
    Unauthorized,
    Unavailable,
)
from om_api.schemas import ContentOut, EntryOut, MessageOut, RecallOut, SearchPage

# Ordered: a subclass (PayloadTooLarge) must come before its base (InvalidRequest).
_LABELS: Final[Sequence[tuple[type[OMClientError], str]]] = (
    (Unauthorized, "unauthorized (check the API key)"),
    (RateLimited, "rate limited, wait and try again"),
    (NotFound, "not found"),
    (Conflict, "conflict"),
    (PayloadTooLarge, "too large, send fewer or smaller messages"),
    (InvalidRequest, "invalid request"),
    (Unavailable, "the om API is unavailable, try again later"),
)
_MEMORY_PREFIX: Final = {"observation": "om:", "reflection": "reflection:"}


def describe_error(exc: OMClientError, secrets: Iterable[str] = ()) -> str:
    """One line for an API failure: what kind, the API's reason and its request id, with every
    non-empty string of ``secrets`` (the API key) replaced by ``[redacted]``."""
    label = next((text for kind, text in _LABELS if isinstance(exc, kind)), "om API error")
    line = f"{label}: {exc.detail or exc}"
    if exc.request_id:
        line += f" (request id {exc.request_id})"
    for secret in secrets:
        if secret:
            line = line.replace(secret, "[redacted]")
    return " ".join(line.split())


def _content_text(content: ContentOut) -> str:
    if isinstance(content, str):
        return content
    return " ".join(part.text if part.text is not None else f"[{part.type}]" for part in content)


def _message_line(message: MessageOut) -> str:
    who = f"{message.role} {message.tool_name}" if message.tool_name else message.role
    parts = [_content_text(message.content)]
    parts += [f"[calls {c.name}({json.dumps(c.arguments)})]" for c in message.tool_calls]
    return f"{who}: {' '.join(part for part in parts if part)}"


def entry_line(entry: EntryOut) -> str:
    """One entry as ``[id] role: text`` (a message) or ``[id] kind: summary``."""
    if entry.message is not None:
        return f"[{entry.id}] {_message_line(entry.message)}"
    if entry.summary is not None:
        return f"[{entry.id}] {entry.kind}: {entry.summary}"
    return f"[{entry.id}] {entry.kind}: {json.dumps(entry.data or {})}"


def recall_problem(found: RecallOut, session_id: str, memory_id: str) -> str | None:
    """Why a recall of ``memory_id`` has nothing to show (revoked, or no such memory in the
    session), ``None`` when it found the memory."""
    if found.reason == "revoked":
        return f"memory {memory_id} was revoked: its source messages were withdrawn"
    if not found.found:
        return f"no memory {memory_id} in session {session_id}"
    return None


def recall_text(found: RecallOut) -> str:
    """A recalled memory: its text, then the exact messages it rests on (and, for a
    reflection, the observations that support it)."""
    prefix = "reflection:" if found.kind == "reflection" else "om:"
    lines = [f"{found.kind} {prefix}{found.id}: {found.text}"]
    if found.dropped:
        lines.append("(dropped from active memory; its sources are still recorded)")
    lines += ["", f"Source messages ({len(found.sources)}):"]
    lines += [entry_line(entry) for entry in found.sources]
    if found.missing_source_entry_ids:
        lines.append(f"Not on the current branch: {', '.join(found.missing_source_entry_ids)}")
    if found.supporting_observations:
        lines += ["", "Supporting observations:"]
        lines += [f"- [om:{o.id}] {o.text}" for o in found.supporting_observations]
    return "\n".join(lines)


def search_text(query: str, page: SearchPage) -> str:
    """A page of search hits, best first, one line each: the hit's id (a message id, or a
    memory id to recall), its kind and session, and its snippet with the matches in «»."""
    if not page.hits:
        return f"No hits for {query!r}."
    lines: list[str] = []
    for hit in page.hits:
        ref = hit.id if hit.kind == "message" else f"{_MEMORY_PREFIX[hit.kind]}{hit.id}"
        lines.append(f"[{ref}] {hit.kind} in session {hit.session_id}: {hit.snippet}")
    return "\n".join(lines)
