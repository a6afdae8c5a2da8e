"""Appending entries inside one write transaction: look up, plan, write.

The caller has locked the session row (``lock_session``), so the leaf, the entry count and
the epoch it reads stay the session's until commit. The decision is pure
(:mod:`om_core.ledger.append_plan`) and raises before the first write, so a batch that fails
writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, bindparam, insert, or_, select, update

from om_core.ledger.append_plan import (
    AppendTarget,
    Position,
    StoredEntry,
    append_lookup,
    plan_append,
)
from om_core.ledger.models import SessionEntry
from om_workers.errors import SessionNotFoundError
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


def _look_up(
    connection: Connection, session: LockedSession, ids: Sequence[str], refs: Sequence[str]
) -> tuple[dict[str, StoredEntry], dict[str, Position]]:
    """The batch ids already stored (in any session of the tenant) and the ``(seq,
    segment_start)`` of the referenced entries of this session."""
    stored: dict[str, StoredEntry] = {}
    positions: dict[str, Position] = {}
    batch, wanted = set(ids), set(refs)
    for start in range(0, max(len(ids), len(refs)), _IN_CHUNK):
        params = {
            "tenant_id": session.tenant_id,
            "ids": list(ids[start : start + _IN_CHUNK]),
            "session_pk": session.pk,
            "refs": list(refs[start : start + _IN_CHUNK]),
        }
        for row in connection.execute(_LOOKUP, params):
            in_session = int(row.session_pk) == session.pk
            if row.id in batch:
                stored[row.id] = StoredEntry(
                    in_session, int(row.seq), int(row.segment_start), row.payload
                )
            if row.id in wanted and in_session:
                positions[row.id] = (int(row.seq), int(row.segment_start))
    return stored, positions


def append_locked(
    connection: Connection,
    session: LockedSession,
    batch: Sequence[SessionEntry],
    *,
    now: datetime,
) -> AppendResult:
    """Append ``batch`` to the locked session, in order, and move the leaf: look up what the
    plan needs, plan (:func:`~om_core.ledger.append_plan.plan_append`: parents, duplicates,
    conflicts, segments, the new leaf), then write the rows, the memory state and the leaf.

    Raises :class:`~om_core.errors.InvalidEntryError` and
    :class:`~om_core.errors.EntryConflictError` before writing anything.
    """
    target = AppendTarget(session.id, session.leaf_id, session.entry_count)
    ids, refs = append_lookup(target, batch)
    stored, positions = _look_up(connection, session, ids, refs)
    plan = plan_append(target, batch, stored, positions, now=now)
    if plan.rows:
        assert plan.leaf_id is not None  # rows were planned
        connection.execute(
            _INSERT_ENTRIES,
            [
                {
                    "id": row.id,
                    "tenant_id": session.tenant_id,
                    "session_pk": session.pk,
                    "parent_id": row.parent_id,
                    "seq": row.seq,
                    "segment_start": row.segment_start,
                    "kind": row.kind,
                    "eligible_tokens": row.eligible_tokens,
                    "payload": dict(row.payload),
                    "created_at": now,
                }
                for row in plan.rows
            ],
        )
        recounted: int | None = None
        if not plan.straight:
            recounted = refresh_memory_state(connection, session.pk, plan.leaf_id, now=now)
        elif plan.has_memory:
            recounted = advance_memory_state(
                connection, session.pk, session.snapshot, plan.written, plan.positions, now=now
            )
        params: dict[str, Any] = {
            "session": session.pk,
            "new_leaf": plan.leaf_id,
            "new_count": plan.entry_count,
            "now": now,
        }
        if recounted is None:
            # Messages after the leaf change no ledger: they only add their own tokens.
            connection.execute(_MOVE_LEAF_ADDING, {**params, "added_tokens": plan.added_tokens})
        else:
            connection.execute(_MOVE_LEAF, {**params, "new_tokens": recounted})
    return AppendResult(
        entries=plan.entries,
        appended_ids=plan.appended_ids,
        duplicate_ids=plan.duplicate_ids,
        leaf_id=plan.leaf_id,
    )
