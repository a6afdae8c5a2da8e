"""Appending entries inside one write transaction: parent defaults, idempotency, seq and segments.

The caller has locked the session row (``lock_session``), so the leaf, the entry count and
the epoch it reads stay the session's until commit; every check here happens before the first
write, so a batch that fails writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, and_, bindparam, insert, or_, select, update

from om_core.ledger.fold import is_eligible_observation_source
from om_core.ledger.models import OBSERVATIONS_RECORDED, SessionEntry
from om_core.ledger.tokens import estimate_entry_tokens
from om_workers.errors import EntryConflictError, InvalidEntryError, SessionNotFoundError
from om_workers.store.branch import MEMORY_KINDS
from om_workers.store.memory_state import advance_memory_state, refresh_memory_state
from om_workers.store.records import AppendResult
from om_workers.store.schema import entries, sessions, snapshots
from om_workers.store.snapshot import (
    SNAPSHOT_COLUMNS,
    Snapshot,
    joined_snapshot,
)

# Bound parameters per IN list: far below SQLite's and PostgreSQL's limits.
_IN_CHUNK = 500


# Statements built once, with bound parameters: constructing one costs several times more
# than running it on SQLite, and an append runs about eight.
_LOCK_SESSION = (
    select(
        sessions.c.pk,
        sessions.c.tenant_id,
        sessions.c.id,
        sessions.c.leaf_id,
        sessions.c.epoch,
        sessions.c.entry_count,
        sessions.c.workspace_id,
        *SNAPSHOT_COLUMNS,
    )
    .select_from(sessions.outerjoin(snapshots, snapshots.c.session_pk == sessions.c.pk))
    .where(sessions.c.tenant_id == bindparam("tenant_id"), sessions.c.id == bindparam("session_id"))
)
_LOCK_SESSION_PG = _LOCK_SESSION.with_for_update(of=sessions)
# One lookup for both: the batch's ids anywhere in the tenant (idempotency, conflicts) and the
# entries of this session the batch refers to (parents, the leaf, coverage cursors).
_LOOKUP = select(
    entries.c.id, entries.c.session_pk, entries.c.seq, entries.c.segment_start, entries.c.payload
).where(
    or_(
        and_(
            entries.c.tenant_id == bindparam("tenant_id"),
            entries.c.id.in_(bindparam("ids", expanding=True)),
        ),
        and_(
            entries.c.session_pk == bindparam("session_pk"),
            entries.c.id.in_(bindparam("refs", expanding=True)),
        ),
    )
)
_INSERT_ENTRIES = insert(entries)


def _move_leaf(unobserved_tokens: Any) -> Any:
    return (
        update(sessions)
        .where(sessions.c.pk == bindparam("session"))
        .values(
            leaf_id=bindparam("new_leaf"),
            entry_count=bindparam("new_count"),
            updated_at=bindparam("now"),
            unobserved_tokens=unobserved_tokens,
        )
    )


_MOVE_LEAF = _move_leaf(bindparam("new_tokens"))
_MOVE_LEAF_ADDING = _move_leaf(sessions.c.unobserved_tokens + bindparam("added_tokens"))


@dataclass(frozen=True, slots=True)
class LockedSession:
    """The session row as read under the write lock (``workspace_id``: the funnel's link)."""

    pk: int
    tenant_id: str
    id: str
    leaf_id: str | None
    epoch: int
    entry_count: int
    snapshot: Snapshot | None
    workspace_id: str | None = None


def lock_session(connection: Connection, tenant_id: str, session_id: str) -> LockedSession:
    """Read and lock the tenant's session row until the transaction ends.

    PostgreSQL takes a row lock (``FOR UPDATE``); SQLite's ``BEGIN IMMEDIATE`` already holds
    the database's write lock. Raises :class:`SessionNotFoundError` when the tenant has no
    such session.
    """
    query = _LOCK_SESSION_PG if connection.dialect.name == "postgresql" else _LOCK_SESSION
    row = connection.execute(query, {"tenant_id": tenant_id, "session_id": session_id}).first()
    if row is None:
        raise SessionNotFoundError(f"no session {session_id!r}")
    return LockedSession(
        pk=int(row.pk),
        tenant_id=row.tenant_id,
        id=row.id,
        leaf_id=row.leaf_id,
        epoch=int(row.epoch),
        entry_count=int(row.entry_count),
        snapshot=joined_snapshot(row),
        workspace_id=row.workspace_id,
    )


def wire(entry: SessionEntry) -> dict[str, Any]:
    """The entry's wire form: what is stored as the payload and compared for idempotency."""
    return entry.model_dump(mode="json", by_alias=True, exclude_none=True)


def iso_timestamp(moment: datetime) -> str:
    """``moment`` as JavaScript's ``toISOString`` writes it (UTC, milliseconds, ``Z``)."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class _Existing:
    session_pk: int
    seq: int
    segment_start: int
    payload: dict[str, Any]


def _look_up(
    connection: Connection, session: LockedSession, ids: Sequence[str], refs: Sequence[str]
) -> tuple[dict[str, _Existing], dict[str, tuple[int, int]]]:
    """The batch ids already stored (in any session of the tenant) and the ``(seq,
    segment_start)`` of the referenced entries of this session."""
    existing: dict[str, _Existing] = {}
    positions: dict[str, tuple[int, int]] = {}
    batch, wanted = set(ids), set(refs)
    for start in range(0, max(len(ids), len(refs)), _IN_CHUNK):
        params = {
            "tenant_id": session.tenant_id,
            "ids": list(ids[start : start + _IN_CHUNK]),
            "session_pk": session.pk,
            "refs": list(refs[start : start + _IN_CHUNK]),
        }
        for row in connection.execute(_LOOKUP, params):
            if row.id in batch:
                existing[row.id] = _Existing(
                    int(row.session_pk), int(row.seq), int(row.segment_start), row.payload
                )
            if row.id in wanted and int(row.session_pk) == session.pk:
                positions[row.id] = (int(row.seq), int(row.segment_start))
    return existing, positions


def _cursors(batch: Sequence[SessionEntry]) -> set[str]:
    found = set()
    for entry in batch:
        if entry.kind == "custom" and entry.data and entry.record_type == OBSERVATIONS_RECORDED:
            cursor = entry.data.get("coversUpToId")
            if isinstance(cursor, str):
                found.add(cursor)
    return found


def _check_batch(session: LockedSession, batch: Sequence[SessionEntry]) -> None:
    if not batch:
        raise InvalidEntryError("an append needs at least one entry")
    seen: set[str] = set()
    for entry in batch:
        if entry.session_id != session.id:
            raise InvalidEntryError(
                f"entry {entry.id!r} names session {entry.session_id!r}, not {session.id!r}"
            )
        if entry.id in seen:
            raise InvalidEntryError(f"entry id {entry.id!r} appears twice in one batch")
        seen.add(entry.id)


def append_locked(
    connection: Connection,
    session: LockedSession,
    batch: Sequence[SessionEntry],
    *,
    now: datetime,
) -> AppendResult:
    """Append ``batch`` to the locked session, in order, and move the leaf.

    An entry without ``parent_id`` goes after the entry before it in the batch (the first after
    the current leaf); an explicit parent must be an entry of this session appended before it.
    An id already stored with the same content is reported as a duplicate and not written
    again (a missing ``parent_id``/``created_at`` matches whatever the store filled in); with
    other content, or in another session, it raises :class:`EntryConflictError`. Wrong session
    ids, repeated ids and unknown parents raise :class:`InvalidEntryError`. Either every new
    entry is written or none is.
    """
    _check_batch(session, batch)
    ids = [entry.id for entry in batch]
    wanted = {e.parent_id for e in batch if e.parent_id is not None}
    if session.leaf_id is not None:
        wanted.add(session.leaf_id)
    # Positions of the coverage cursors the batch's records move to, read along with the
    # parents: advancing the snapshot then needs no lookup of its own.
    wanted.update(_cursors(batch))
    existing, positions = _look_up(connection, session, ids, sorted(wanted - set(ids)))

    stamp = iso_timestamp(now)
    leaf = session.leaf_id
    running_parent = session.leaf_id
    next_seq = session.entry_count + 1
    straight = True  # every new entry went right after the leaf of its moment
    memory = False
    new_tokens = 0
    rows: list[dict[str, Any]] = []
    stored: list[SessionEntry] = []
    appended: list[str] = []
    duplicates: list[str] = []
    written: list[SessionEntry] = []

    for entry in batch:
        old = existing.get(entry.id)
        if old is not None:
            if old.session_pk != session.pk:
                raise EntryConflictError(entry.id)
            kept = SessionEntry.model_validate(old.payload)
            candidate = entry.model_copy(
                update={
                    "parent_id": entry.parent_id if entry.parent_id is not None else kept.parent_id,
                    "created_at": entry.created_at
                    if entry.created_at is not None
                    else kept.created_at,
                }
            )
            if wire(candidate) != old.payload:
                raise EntryConflictError(entry.id)
            positions[entry.id] = (old.seq, old.segment_start)
            running_parent = entry.id
            stored.append(kept)
            duplicates.append(entry.id)
            continue

        parent = entry.parent_id if entry.parent_id is not None else running_parent
        seq = next_seq
        if parent is None:
            segment_start = seq
        else:
            position = positions.get(parent)
            if position is None:
                raise InvalidEntryError(
                    f"entry {entry.id!r}: parent {parent!r} is not an earlier entry of this session"
                )
            # A segment continues only when the parent is the entry appended just before.
            segment_start = position[1] if position[0] == seq - 1 else seq
        straight = straight and parent == leaf
        resolved = entry.model_copy(
            update={"parent_id": parent, "created_at": entry.created_at or stamp}
        )
        tokens = estimate_entry_tokens(entry) if is_eligible_observation_source(entry) else 0
        rows.append(
            {
                "id": entry.id,
                "tenant_id": session.tenant_id,
                "session_pk": session.pk,
                "parent_id": parent,
                "seq": seq,
                "segment_start": segment_start,
                "kind": entry.kind,
                "eligible_tokens": tokens,
                "payload": wire(resolved),
                "created_at": now,
            }
        )
        positions[entry.id] = (seq, segment_start)
        next_seq += 1
        leaf = entry.id
        running_parent = entry.id
        memory = memory or entry.kind in MEMORY_KINDS
        new_tokens += tokens
        stored.append(resolved)
        appended.append(entry.id)
        written.append(resolved)

    if rows:
        connection.execute(_INSERT_ENTRIES, rows)
        assert leaf is not None  # rows were written
        recounted: int | None = None
        if not straight:
            recounted = refresh_memory_state(connection, session.pk, leaf, now=now)
        elif memory:
            recounted = advance_memory_state(
                connection, session.pk, session.snapshot, written, positions, now=now
            )
        params: dict[str, Any] = {
            "session": session.pk,
            "new_leaf": leaf,
            "new_count": next_seq - 1,
            "now": now,
        }
        if recounted is None:
            # Messages after the leaf change no ledger: they only add their own tokens.
            connection.execute(_MOVE_LEAF_ADDING, {**params, "added_tokens": new_tokens})
        else:
            connection.execute(_MOVE_LEAF, {**params, "new_tokens": recounted})
    return AppendResult(
        entries=tuple(stored),
        appended_ids=tuple(appended),
        duplicate_ids=tuple(duplicates),
        leaf_id=leaf,
    )
