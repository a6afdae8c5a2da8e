"""The per-session folded-ledger snapshot and the unobserved-token count.

Invariant, kept by every write that moves a leaf or appends memory: when a session has a
snapshot row, its entry lies on the current branch and every ``custom``/``compaction`` entry
(the only kinds the fold reads) on that branch is at or before it; without a row, the branch
has no such entry. So the ledger of the current branch is the snapshot's ledger folded over
the entries after it, and those are plain messages in the common case: context reads never
re-fold a long session.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, delete, insert, select, update

from om_core.ledger import fold_ledger
from om_core.models import ObservationalMemoryLedger
from om_core.scopes import WorkScopeMap, fold_work_scope_map
from om_workers.store.branch import (
    MEMORY_KINDS,
    Segment,
    branch_segments,
    entry_position,
    read_branch_payloads,
    seq_on_branch,
    sum_eligible_tokens,
    to_entries,
)
from om_workers.store.schema import sessions, snapshots


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A stored fold of one branch up to (and including) entry ``entry_id`` at ``seq``."""

    entry_id: str
    seq: int
    ledger: ObservationalMemoryLedger
    scope_map: WorkScopeMap | None


def read_snapshot(connection: Connection, session_pk: int) -> Snapshot | None:
    """The session's snapshot row, or ``None``."""
    row = connection.execute(select(snapshots).where(snapshots.c.session_pk == session_pk)).first()
    return None if row is None else _to_snapshot(row)


def _to_snapshot(row: Row[Any]) -> Snapshot:
    return Snapshot(
        entry_id=row.entry_id,
        seq=int(row.seq),
        ledger=ObservationalMemoryLedger.model_validate(row.ledger),
        scope_map=None if row.scope_map is None else WorkScopeMap.model_validate(row.scope_map),
    )


class SnapshotCache:
    """Parsed snapshots of the sessions read last, reused while their row is unchanged.

    Parsing a long session's ledger (10,000 observations) costs more than the rest of a
    context read; the row's ``(entry_id, seq, updated_at)`` says whether the parsed copy is
    still what the row holds, so a hit costs one narrow SELECT. Thread-safe; ``size`` sessions.
    """

    def __init__(self, size: int = 128) -> None:
        self._items: OrderedDict[int, tuple[tuple[str, int, datetime], Snapshot]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def read(self, connection: Connection, session_pk: int) -> Snapshot | None:
        """The session's snapshot, as :func:`read_snapshot` returns it."""
        row = connection.execute(
            select(snapshots.c.entry_id, snapshots.c.seq, snapshots.c.updated_at).where(
                snapshots.c.session_pk == session_pk
            )
        ).first()
        if row is None:
            return None
        with self._lock:
            hit = self._items.get(session_pk)
            if hit is not None and hit[0] == (row.entry_id, int(row.seq), row.updated_at):
                self._items.move_to_end(session_pk)
                return hit[1]
        full = connection.execute(
            select(snapshots).where(snapshots.c.session_pk == session_pk)
        ).first()
        if full is None:
            return None
        snapshot = _to_snapshot(full)
        with self._lock:
            self._items[session_pk] = ((full.entry_id, int(full.seq), full.updated_at), snapshot)
            self._items.move_to_end(session_pk)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return snapshot


def valid_snapshot(snapshot: Snapshot | None, segments: list[Segment]) -> Snapshot | None:
    """The snapshot when it lies on the branch the segments describe, else ``None``.

    A row written before snapshots kept the scope map is stale too: it is refolded once.
    """
    if (
        snapshot is not None
        and snapshot.scope_map is not None
        and seq_on_branch(snapshot.seq, segments)
    ):
        return snapshot
    return None


def refresh_memory_state(
    connection: Connection, session_pk: int, leaf_id: str | None, *, now: datetime
) -> ObservationalMemoryLedger:
    """Bring the snapshot and unobserved-token count in line with the branch ending at the leaf.

    Call inside the write transaction that appended memory entries or moved the leaf off the
    straight line (fork, explicit parent). Reads only memory entries after a still-valid
    snapshot, or all memory entries of the branch when the leaf left the snapshot's branch.
    Returns the branch's ledger.
    """
    segments = branch_segments(connection, session_pk, leaf_id)
    stored = read_snapshot(connection, session_pk)
    base = valid_snapshot(stored, segments)
    rows = read_branch_payloads(
        connection,
        session_pk,
        segments,
        after_seq=base.seq if base is not None else 0,
        kinds=MEMORY_KINDS,
    )
    if rows:
        entries = to_entries(rows)
        ledger = fold_ledger(entries, initial=base.ledger if base is not None else None)
        scope_map = fold_work_scope_map(
            entries, initial=base.scope_map if base is not None else None
        )
        assert leaf_id is not None  # rows come from a branch, so there is a leaf
        _write_snapshot(
            connection,
            session_pk,
            Snapshot(entry_id=leaf_id, seq=segments[-1][1], ledger=ledger, scope_map=scope_map),
            now,
            stored,
        )
    elif base is not None:
        ledger = base.ledger
    else:
        ledger = ObservationalMemoryLedger()
        if stored is not None:
            connection.execute(delete(snapshots).where(snapshots.c.session_pk == session_pk))
    connection.execute(
        update(sessions)
        .where(sessions.c.pk == session_pk)
        .values(unobserved_tokens=_unobserved_tokens(connection, session_pk, segments, ledger))
    )
    return ledger


def _write_snapshot(
    connection: Connection,
    session_pk: int,
    snapshot: Snapshot,
    now: datetime,
    stored: Snapshot | None,
) -> None:
    assert snapshot.scope_map is not None
    values = {
        "entry_id": snapshot.entry_id,
        "seq": snapshot.seq,
        "ledger": snapshot.ledger.to_json_dict(),
        "scope_map": snapshot.scope_map.to_json_dict(),
        "updated_at": now,
    }
    if stored is None:
        connection.execute(insert(snapshots).values(session_pk=session_pk, **values))
    else:
        connection.execute(
            update(snapshots).where(snapshots.c.session_pk == session_pk).values(**values)
        )


def _unobserved_tokens(
    connection: Connection,
    session_pk: int,
    segments: list[Segment],
    ledger: ObservationalMemoryLedger,
) -> int:
    # Same rule as om_core's unscanned_entries: a cursor off the branch means nothing on this
    # branch was scanned.
    after_seq = 0
    cursor = ledger.observation_covers_up_to_id
    if cursor is not None:
        position = entry_position(connection, session_pk, cursor)
        if position is not None and seq_on_branch(position[0], segments):
            after_seq = position[0]
    return sum_eligible_tokens(connection, session_pk, segments, after_seq=after_seq)
