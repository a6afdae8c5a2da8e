"""The per-session folded-ledger snapshot and the unobserved-token count.

Invariant, kept by every write that moves a leaf or appends memory: when a session has a
snapshot row, its entry lies on the current branch and every ``custom``/``compaction`` entry
(the only kinds the fold reads) on that branch is at or before it; without a row, the branch
has no such entry. So the ledger of the current branch is the snapshot folded over the entries
after it, and those are plain messages in the common case.

The row holds the cursors and the scope map; observations and reflections are
``memory_items`` rows (see ``schema``). This module reads them; :mod:`.memory_state` keeps
them in line with the branch on every write.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BindParameter, Connection, Row, bindparam, select

from om_core.ledger.models import (
    Observation,
    ObservationalMemoryLedger,
    Reflection,
)
from om_core.scopes.index import WorkScopeMap
from om_workers.store.branch import (
    Segment,
    seq_on_branch,
)
from om_workers.store.driver import FastStatement
from om_workers.store.schema import memory_items, snapshots

OBSERVATION = "observation"
REFLECTION = "reflection"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A stored fold of one branch up to (and including) entry ``entry_id`` at ``seq``.

    The row alone: cursors, scope map and ``next_ord`` (the next item order number); the
    ledger's items are read with :func:`read_ledger` or :func:`read_working_ledger`.
    ``observation_cursor_seq`` is the cursor's seq on the branch (0: none, or off the branch,
    or not known: read from the root).
    """

    entry_id: str
    seq: int
    observation_cursor: str | None
    observation_cursor_seq: int
    reflection_cursor: str | None
    next_ord: int
    scope_map: WorkScopeMap | None
    updated_at: datetime


SNAPSHOT_FIELDS = (
    "entry_id",
    "seq",
    "observation_cursor",
    "observation_cursor_seq",
    "reflection_cursor",
    "next_ord",
    "scope_map",
    "updated_at",
)
"""The snapshot row's columns, in :class:`Snapshot`'s order."""
SNAPSHOT_COLUMNS = tuple(snapshots.c[name].label(f"snapshot_{name}") for name in SNAPSHOT_FIELDS)
"""The snapshot's columns, labelled for a query that joins the session row to its snapshot."""

# Statements built once, with bound parameters: constructing one costs several times more than
# running it on SQLite, and every flush runs these.
_SESSION_PK: BindParameter[Any] = bindparam("session")
_READ_SNAPSHOT = FastStatement(
    select(*SNAPSHOT_COLUMNS).where(snapshots.c.session_pk == _SESSION_PK)
)
_ALL_ITEMS = (
    select(
        memory_items.c.kind,
        memory_items.c.payload,
        memory_items.c.pending,
        memory_items.c.dropped_ord,
    )
    .where(memory_items.c.session_pk == _SESSION_PK)
    .order_by(memory_items.c.ord)
)
_ACTIVE_POOL = (
    select(memory_items.c.payload, memory_items.c.pending)
    .where(
        memory_items.c.session_pk == _SESSION_PK,
        memory_items.c.kind == OBSERVATION,
        memory_items.c.dropped_ord.is_(None),
    )
    .order_by(memory_items.c.ord)
)


def read_snapshot(connection: Connection, session_pk: int) -> Snapshot | None:
    """The session's snapshot row, or ``None``."""
    row = _READ_SNAPSHOT.first(connection, {"session": session_pk})
    return None if row is None else joined_snapshot(row)


def joined_snapshot(row: Row[Any]) -> Snapshot | None:
    """The snapshot in a row that selected :data:`SNAPSHOT_COLUMNS` (``None`` if it has none)."""
    values = row._mapping
    if values["snapshot_seq"] is None:
        return None
    scope_map = values["snapshot_scope_map"]
    return Snapshot(
        entry_id=values["snapshot_entry_id"],
        seq=int(values["snapshot_seq"]),
        observation_cursor=values["snapshot_observation_cursor"],
        observation_cursor_seq=int(values["snapshot_observation_cursor_seq"]),
        reflection_cursor=values["snapshot_reflection_cursor"],
        next_ord=int(values["snapshot_next_ord"]),
        scope_map=None if scope_map is None else WorkScopeMap.model_validate(scope_map),
        updated_at=values["snapshot_updated_at"],
    )


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


def read_ledger(
    connection: Connection, session_pk: int, snapshot: Snapshot
) -> ObservationalMemoryLedger:
    """The whole ledger the snapshot holds: every observation (dropped ones too), every
    reflection, in record order."""
    rows = connection.execute(_ALL_ITEMS, {"session": session_pk}).all()
    observations: list[Observation] = []
    reflections: list[Reflection] = []
    pending: list[str] = []
    dropped: list[tuple[int, str]] = []
    for row in rows:
        if row.kind == REFLECTION:
            reflections.append(Reflection.model_validate(row.payload))
            continue
        observation = Observation.model_validate(row.payload)
        observations.append(observation)
        if row.pending:
            pending.append(observation.id)
        if row.dropped_ord is not None:
            dropped.append((int(row.dropped_ord), observation.id))
    return ObservationalMemoryLedger(
        observations=tuple(observations),
        reflections=tuple(reflections),
        dropped_observation_ids=tuple(oid for _, oid in sorted(dropped)),
        observation_covers_up_to_id=snapshot.observation_cursor,
        reflection_covers_up_to_id=snapshot.reflection_cursor,
        pending_reflection_observation_ids=tuple(pending),
    )


def read_working_ledger(
    connection: Connection, session_pk: int, snapshot: Snapshot
) -> ObservationalMemoryLedger:
    """What a flush reads of the snapshot: the cursors, the active observations
    in record order and the ids pending reflection. Dropped observations and reflections are
    left out, so a flush reads the active pool (which the dropper bounds), not the history."""
    rows = connection.execute(_ACTIVE_POOL, {"session": session_pk}).all()
    observations = tuple(Observation.model_validate(row.payload) for row in rows)
    return ObservationalMemoryLedger(
        observations=observations,
        observation_covers_up_to_id=snapshot.observation_cursor,
        reflection_covers_up_to_id=snapshot.reflection_cursor,
        pending_reflection_observation_ids=tuple(
            o.id for o, row in zip(observations, rows, strict=True) if row.pending
        ),
    )


MAX_CARRY = 512
"""Entries (by seq) a cached ledger may lie behind the snapshot and still be folded forward."""


@dataclass(frozen=True, slots=True)
class LedgerBase:
    """A branch's whole ledger as folded up to and including its entry numbered ``seq``."""

    seq: int
    ledger: ObservationalMemoryLedger


_Version = tuple[str, int, datetime, datetime | None]


def _version(snapshot: Snapshot, rewritten_at: datetime | None) -> _Version:
    return (snapshot.entry_id, snapshot.seq, snapshot.updated_at, rewritten_at)


class SnapshotCache:
    """Whole ledgers of the sessions read last, reused while their snapshot row is unchanged,
    and folded forward when the snapshot moved on along the same branch.

    Reading and parsing a long session's items (10,000 observations) costs more than the rest
    of a context read; the row's ``(entry_id, seq, updated_at)`` says whether the parsed copy is
    still what the rows hold. Every memory or scope record appended moves the row, though, so
    :meth:`base` also offers a ledger of an *earlier* point of the current branch: the ledger up
    to an entry is a function of that entry alone (its ancestry never changes), so when that
    entry is on the branch (checked against the caller's segments) the caller folds only the
    entries after it. Thread-safe; ``size`` sessions.
    """

    def __init__(self, size: int = 1024) -> None:
        self._items: OrderedDict[int, tuple[_Version, LedgerBase]]
        self._items = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def ledger(
        self,
        connection: Connection,
        session_pk: int,
        snapshot: Snapshot,
        rewritten_at: datetime | None = None,
    ) -> ObservationalMemoryLedger:
        """The snapshot's whole ledger, as :func:`read_ledger` returns it. ``rewritten_at``:
        the session row's (a cached ledger from before a rewrite is never used)."""
        version = _version(snapshot, rewritten_at)
        with self._lock:
            hit = self._items.get(session_pk)
            if hit is not None and hit[0] == version:
                self._items.move_to_end(session_pk)
                return hit[1].ledger
        ledger = read_ledger(connection, session_pk, snapshot)
        self.keep(session_pk, snapshot, LedgerBase(snapshot.seq, ledger), rewritten_at)
        return ledger

    def base(
        self,
        connection: Connection,
        session_pk: int,
        snapshot: Snapshot,
        segments: list[Segment],
        rewritten_at: datetime | None = None,
    ) -> LedgerBase:
        """Where to fold the branch ``segments`` describe from: the snapshot's own ledger, or
        a cached ledger of an earlier entry on that branch at most :data:`MAX_CARRY` seqs
        back (then fold the entries after ``result.seq``, and :meth:`keep` the ledger at the
        snapshot's entry)."""
        with self._lock:
            hit = self._items.get(session_pk)
        version = _version(snapshot, rewritten_at)
        # An earlier ledger is only as good as the entries it folded: after a rewrite in
        # place (an erasure's placeholders) it may hold what the rewrite removed.
        if hit is not None and hit[0] != version and hit[0][3] == rewritten_at:
            earlier = hit[1]
            if earlier.seq < snapshot.seq <= earlier.seq + MAX_CARRY and seq_on_branch(
                earlier.seq, segments
            ):
                return earlier
        return LedgerBase(snapshot.seq, self.ledger(connection, session_pk, snapshot, rewritten_at))

    def keep(
        self,
        session_pk: int,
        snapshot: Snapshot,
        base: LedgerBase,
        rewritten_at: datetime | None = None,
    ) -> None:
        """Remember ``base`` (folded up to the snapshot's entry) as the snapshot's ledger."""
        version = _version(snapshot, rewritten_at)
        with self._lock:
            self._items[session_pk] = (version, base)
            self._items.move_to_end(session_pk)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
