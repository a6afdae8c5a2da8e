"""A proxied turn against the session: what the session already holds, the trimmed request,
and the recorded turn. Every step goes through the services the HTTP routes use (the store's
appends and reads, the context route, the flush request), never a path of its own.

What the session holds is found from the branch's tail alone: the proxy's entry ids are chain
ids (:mod:`.wire`), so when the branch's last message is the client's k-th message, the
client's first k messages are all on the branch, in order. Only then is the request trimmed:
those k messages give way to the two context blocks of the session (memory, then the recent
exact messages: every message memory does not cover yet), the instructions and the new
messages are kept as sent. Any other history (edited, retried with another answer, or a
session written by other clients) is forwarded whole, and its messages recorded from the
last one the session holds, so the branch forks there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from om_api.schemas import MAX_BATCH_ENTRIES
from om_api.server.proxy.wire import INSTRUCTION_ROLES, ReadMessages, next_id
from om_api.server.routes.memory import context_answer as read_context
from om_api.server.state import ApiState
from om_core.errors import ObservationalMemoryError
from om_core.ledger.models import Message, SessionEntry
from om_workers.errors import OMWorkersError, SessionExistsError, SessionNotFoundError
from om_workers.jobs.requests import request_flush

log = logging.getLogger(__name__)

TAIL_FIRST_READ: Final = 64
TAIL_MAX_READ: Final = 4096
"""The branch's tail is read from its last 64 entries, doubled while it holds no message at
all (memory records only), up to 4,096."""


@dataclass(frozen=True)
class Held:
    """How many of the client's recorded messages the session holds (a prefix), and whether
    the last of them is the branch's last message (only then is the request trimmed)."""

    count: int
    at_leaf: bool


@dataclass(frozen=True)
class Prepared:
    """A request ready to forward: the messages to send upstream and what the session held."""

    messages: list[dict[str, Any]]
    held: Held

    @property
    def trimmed(self) -> bool:
        """True when the held messages were replaced by the context blocks."""
        return self.held.at_leaf and self.held.count > 0


def prepare(state: ApiState, tenant_id: str, session_id: str, read: ReadMessages) -> Prepared:
    """Create the session on first use, find what it holds, and build the upstream's messages.

    Raises the store's errors (a session erased meanwhile: 404) and the context route's."""
    held = held_prefix(state, tenant_id, session_id, read.ids)
    if not (held.at_leaf and held.count > 0):
        return Prepared(messages=list(read.raw), held=held)
    context = read_context(state, tenant_id, session_id, None, "self+ancestors", None)
    first_new = _first_kept(read, held.count)
    instructions = [m for m in read.raw[:first_new] if m.get("role") in INSTRUCTION_ROLES]
    blocks = [
        {"role": "system", "content": block.text} for block in context.blocks if block.text.strip()
    ]
    return Prepared(messages=[*instructions, *blocks, *read.raw[first_new:]], held=held)


def _first_kept(read: ReadMessages, held: int) -> int:
    """The index in ``read.raw`` of the first message forwarded as sent: the first new one,
    or, when new tool results lead, the assistant message that called them (a tool result
    never goes upstream without its call)."""
    first = read.recorded[held] if held < len(read.recorded) else len(read.raw)
    while first > 0 and first < len(read.raw) and read.raw[first].get("role") == "tool":
        first -= 1
        while first > 0 and read.raw[first].get("role") in INSTRUCTION_ROLES:
            first -= 1
    return first


def held_prefix(state: ApiState, tenant_id: str, session_id: str, ids: Sequence[str]) -> Held:
    """The prefix of ``ids`` the session's current branch holds (see the module's doc); an
    unknown session is created, empty. Raises :class:`SessionNotFoundError` for a session
    erased in between."""
    position = {entry_id: index for index, entry_id in enumerate(ids)}
    limit = TAIL_FIRST_READ
    while True:
        try:
            tail = state.store.read_tail(tenant_id, session_id, limit)
        except SessionNotFoundError:
            _create(state, tenant_id, session_id)
            return Held(count=0, at_leaf=True)
        messages = [entry for entry in reversed(tail) if entry.kind == "message"]
        for rank, entry in enumerate(messages):
            index = position.get(entry.id)
            if index is not None:
                return Held(count=index + 1, at_leaf=rank == 0)
        if messages or len(tail) < limit or limit >= TAIL_MAX_READ:
            return Held(count=0, at_leaf=not messages)
        limit *= 2


def _create(state: ApiState, tenant_id: str, session_id: str) -> None:
    try:
        state.store.create_session(tenant_id, session_id)
    except SessionExistsError:
        # Created by a concurrent request, or erased: the read says which (404 for erased).
        state.store.get_session(tenant_id, session_id)


def turn_entries(
    tenant_id: str, session_id: str, read: ReadMessages, held: Held, answer: Message | None
) -> list[SessionEntry]:
    """The entries a turn appends: the client's new messages and the answer, after the leaf
    (past the memory records a flush appended after the last held message). When the last
    held message is not the branch's last message, it leads the batch (stored already, it
    anchors the new ones), so the branch forks there."""
    start = held.count - 1 if held.count > 0 and not held.at_leaf else held.count
    pairs = list(zip(read.ids[start:], read.messages[start:], strict=True))
    if answer is not None:
        pairs.append((next_id(read.ids, tenant_id, session_id, answer), answer))
    return [
        SessionEntry(id=entry_id, session_id=session_id, kind="message", message=message)
        for entry_id, message in pairs
    ]


def record_turn(
    state: ApiState,
    tenant_id: str,
    session_id: str,
    read: ReadMessages,
    held: Held,
    answer: Message | None,
    *,
    flush: bool = True,
) -> bool:
    """Append the turn (idempotent: every id is a chain id) and, with ``flush``, request a
    flush (:func:`request_turn_flush`). Returns False, logged, when the append failed: the
    client's next request carries the same messages and records them then."""
    entries = turn_entries(tenant_id, session_id, read, held, answer)
    try:
        _append(state, tenant_id, session_id, entries)
    except ObservationalMemoryError as exc:
        log.error("proxy could not record a turn of %s: %s", session_id, type(exc).__name__)
        return False
    if flush:
        request_turn_flush(state, tenant_id, session_id)
    return True


def request_turn_flush(state: ApiState, tenant_id: str, session_id: str) -> None:
    """Request a flush as ``POST .../flush`` does. One that cannot be requested is logged
    only: the reconciler requests it once the session's tokens pass the threshold."""
    try:
        request_flush(state.store, state.redis, tenant_id, session_id, publish=state.publisher())
    except OMWorkersError as exc:
        log.warning("proxy could not request a flush of %s: %s", session_id, type(exc).__name__)


def _append(
    state: ApiState, tenant_id: str, session_id: str, entries: Sequence[SessionEntry]
) -> None:
    # A batch over the append cap goes in several, each anchored on the last entry of the one
    # before (a duplicate), so the chain stays one branch.
    step = MAX_BATCH_ENTRIES - 1
    for start in range(0, max(len(entries) - 1, 1), step):
        batch = entries[start : start + step + 1]
        if batch:
            state.store.append_entries(tenant_id, session_id, list(batch))
