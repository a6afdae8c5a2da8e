"""What reads of a session's memory see: the snapshot folded over the entries after it.

:func:`read_memory_view` is the view a flush reads (the active pool and the entries after the
observation cursor); :func:`read_context_state` the whole ledger a context or recall read
renders. Both are functions of a connection, so they run inside whatever transaction the caller
holds: a read unit of work, or the one that starts a flush job (:meth:`SqlStore.start_job`),
which then reads its row, raises the epoch and reads the session in one step.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, bindparam, select

from om_core.flush.unit_of_work import MemoryView
from om_core.ledger.append_plan import MEMORY_KINDS
from om_core.ledger.fold import fold_ledger, unscanned_entries
from om_core.ledger.models import ObservationalMemoryLedger, SessionEntry
from om_core.scopes.index import WorkScopeMap, fold_work_scope_map
from om_workers.errors import SessionNotFoundError
from om_workers.store.branch import Segment, branch_segments, read_branch_payloads, to_entries
from om_workers.store.driver import FastStatement
from om_workers.store.records import ContextState
from om_workers.store.schema import sessions, snapshots, tombstones
from om_workers.store.snapshot import (
    SNAPSHOT_COLUMNS,
    LedgerBase,
    Snapshot,
    SnapshotCache,
    joined_snapshot,
    read_snapshot,
    read_working_ledger,
    valid_snapshot,
)

# Built once: constructing a statement costs several times more than running it on SQLite.
_SESSION = FastStatement(
    select(sessions.c.pk, sessions.c.leaf_id, *SNAPSHOT_COLUMNS)
    .select_from(sessions.outerjoin(snapshots, snapshots.c.session_pk == sessions.c.pk))
    .where(sessions.c.tenant_id == bindparam("tenant_id"), sessions.c.id == bindparam("session_id"))
)
WITHHELD_IDS = select(tombstones.c.entry_id).where(
    tombstones.c.tenant_id == bindparam("tenant_id"), tombstones.c.scope == bindparam("scope")
)
"""Entry ids one tenant's tombstone ``scope`` withholds (parameters ``tenant_id``, ``scope``)."""
WITHHELD = FastStatement(WITHHELD_IDS)


def read_memory_view(
    connection: Connection, tenant_id: str, session_id: str, invalidation_scope: str | None
) -> MemoryView:
    """What a flush reads: the working ledger from the snapshot, the branch entries after the
    observation cursor, the scope map, the ids ``invalidation_scope`` withholds and the leaf.

    Reads the active observations and the entries after the earlier of the snapshot and the
    cursor, never the branch from its root (unless nothing was ever observed, when all of it is
    new work). Raises :class:`SessionNotFoundError`.
    """
    row = _SESSION.first(connection, {"tenant_id": tenant_id, "session_id": session_id})
    if row is None:
        raise SessionNotFoundError(f"no session {session_id!r}")
    session_pk = int(row.pk)
    segments = branch_segments(connection, session_pk, row.leaf_id)
    # Off the branch (never after our own writes) counts as no snapshot: fold it all.
    snapshot = valid_snapshot(joined_snapshot(row), segments)
    ledger = ObservationalMemoryLedger()
    base_seq = start = 0
    if snapshot is not None:
        ledger = read_working_ledger(connection, session_pk, snapshot)
        base_seq = snapshot.seq
        start = min(base_seq, snapshot.observation_cursor_seq)
    rows = read_branch_payloads(connection, session_pk, segments, after_seq=start)
    withheld: frozenset[str] = frozenset()
    if invalidation_scope is not None:
        params = {"tenant_id": tenant_id, "scope": invalidation_scope}
        withheld = frozenset(WITHHELD.scalars(connection, params))
    entries = to_entries(rows)
    after = [e for r, e in zip(rows, entries, strict=True) if int(r.seq) > base_seq]
    ledger = fold_ledger(after, initial=ledger) if after else ledger
    scope_map = fold_work_scope_map(
        after, initial=snapshot.scope_map if snapshot is not None else None
    )
    return MemoryView(
        session_id=session_id,
        ledger=ledger,
        unobserved=tuple(unscanned_entries(entries, ledger)),
        scope_map=scope_map,
        invalidated_ids=withheld,
        leaf_id=row.leaf_id,
    )


def read_context_state(
    connection: Connection,
    session_pk: int,
    leaf_id: str | None,
    cache: SnapshotCache,
    segments: list[Segment] | None = None,
    *,
    rewritten_at: datetime | None = None,
    memory_only: bool = False,
) -> ContextState:
    """The branch ending at ``leaf_id`` (whose ``segments`` the caller may have read already):
    its whole ledger and scope map from the stored snapshot (parsed through ``cache``, for the
    session row's ``rewritten_at``) plus the entries after it. ``memory_only`` reads and parses
    only the memory entries after the snapshot (all the ledger and the scope map fold), which
    is then all ``result.entries`` holds: a context read needs no messages from here, and a
    session with no memory yet has no snapshot, so it would otherwise parse its whole branch.

    ``result.ledger`` equals the fold of the whole branch, without reading the branch before
    the snapshot.
    """
    if segments is None:
        segments = branch_segments(connection, session_pk, leaf_id)
    stored = read_snapshot(connection, session_pk)
    return context_state_from(
        connection,
        session_pk,
        leaf_id,
        cache,
        segments,
        stored,
        rewritten_at=rewritten_at,
        memory_only=memory_only,
    )


def context_state_from(
    connection: Connection,
    session_pk: int,
    leaf_id: str | None,
    cache: SnapshotCache,
    segments: list[Segment],
    stored: Snapshot | None,
    *,
    rewritten_at: datetime | None = None,
    memory_only: bool = False,
) -> ContextState:
    """:func:`read_context_state` with the snapshot row already read (``stored``, ``None``
    when the session has none), in the same transaction."""
    snapshot = valid_snapshot(stored, segments)
    if snapshot is None and stored is not None:
        # Writes keep the snapshot on the branch; should one not be, fold the branch's memory
        # entries rather than answer from another branch.
        memory = to_entries(
            read_branch_payloads(connection, session_pk, segments, kinds=MEMORY_KINDS)
        )
        return ContextState(
            ledger=fold_ledger(memory),
            snapshot_entry_id=leaf_id,
            entries=(),
            leaf_id=leaf_id,
            scope_map=fold_work_scope_map(memory),
        )
    initial: ObservationalMemoryLedger | None = None
    start = 0
    if snapshot is not None:
        base = cache.base(connection, session_pk, snapshot, segments, rewritten_at)
        initial, start = base.ledger, base.seq
    kinds = MEMORY_KINDS if memory_only else None
    # The module's invariant: no memory entry follows the snapshot's on its branch (without a
    # snapshot the branch has none), so from the snapshot on there are no memory entries to read.
    nothing_after = memory_only and start == (snapshot.seq if snapshot is not None else 0)
    rows = (
        []
        if nothing_after
        else read_branch_payloads(connection, session_pk, segments, after_seq=start, kinds=kinds)
    )
    after = to_entries(rows)
    if snapshot is not None and start < snapshot.seq:
        # A cached ledger of an earlier entry: fold up to the snapshot's entry, keep that.
        upto = [e for r, e in zip(rows, after, strict=True) if int(r.seq) <= snapshot.seq]
        initial = fold_ledger(upto, initial=initial)
        cache.keep(session_pk, snapshot, LedgerBase(snapshot.seq, initial), rewritten_at)
        after = after[len(upto) :]
    ledger = fold_ledger(after, initial=initial) if after else initial
    return ContextState(
        ledger=ledger if ledger is not None else ObservationalMemoryLedger(),
        snapshot_entry_id=snapshot.entry_id if snapshot is not None else None,
        entries=after,
        leaf_id=leaf_id,
        scope_map=_scope_map(after, snapshot),
        observation_cursor_seq=snapshot.observation_cursor_seq if snapshot is not None else 0,
    )


def _scope_map(after: Sequence[SessionEntry], snapshot: Snapshot | None) -> WorkScopeMap:
    """The scope map of the snapshot folded over the entries after it: the stored map itself
    when none follows (it was written by a fold, so folding nothing over it gives it back)."""
    if snapshot is not None and snapshot.scope_map is not None and not after:
        return snapshot.scope_map
    return fold_work_scope_map(after, initial=snapshot.scope_map if snapshot is not None else None)
