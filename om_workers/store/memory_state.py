"""Keeping the snapshot in line with the branch: the writes behind every memory append.

A straight append of memory records applies just those records to the item rows
(:class:`ItemWriter`, the same rules as ``om_core``'s fold), so a write costs what it records,
whatever the session's history; a leaf moved off the straight line refolds only what lies
after a still-valid snapshot. Every function runs inside the caller's write transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import BindParameter, Connection, bindparam, delete, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as lite_insert

from om_core.ledger.append_plan import MEMORY_KINDS
from om_core.ledger.fold import (
    fold_ledger,
    is_eligible_observation_source,
    ledger_from_snapshot,
    parse_record,
    parse_snapshot,
)
from om_core.ledger.models import (
    Observation,
    ObservationalMemoryLedger,
    ObservationsDropped,
    ObservationsRecorded,
    Reflection,
    SessionEntry,
)
from om_core.ledger.tokens import estimate_entry_tokens
from om_core.scopes.index import WorkScopeMap, fold_work_scope_map
from om_workers.store.branch import (
    Segment,
    branch_segments,
    entry_position,
    read_branch_payloads,
    seq_on_branch,
    sum_eligible_tokens,
    to_entries,
)
from om_workers.store.driver import FastStatement
from om_workers.store.schema import memory_items, snapshots
from om_workers.store.snapshot import (
    OBSERVATION,
    REFLECTION,
    SNAPSHOT_FIELDS,
    Snapshot,
    read_snapshot,
    valid_snapshot,
)

_IN_CHUNK = 500
_SESSION_PK: BindParameter[Any] = bindparam("session")

# Statements built once, with bound parameters: constructing one costs several times more than
# running it on SQLite, and every memory append runs several.
_REFLECTED = (
    update(memory_items)
    .where(
        memory_items.c.session_pk == _SESSION_PK,
        memory_items.c.kind == OBSERVATION,
        memory_items.c.dropped_ord.is_(None),
        memory_items.c.pending.is_(True),
    )
    .values(pending=False)
)
_ACTIVE_AMONG = select(memory_items.c.item_id).where(
    memory_items.c.session_pk == _SESSION_PK,
    memory_items.c.kind == OBSERVATION,
    memory_items.c.item_id.in_(bindparam("ids", expanding=True)),
    memory_items.c.dropped_ord.is_(None),
)
_DROP = (
    update(memory_items)
    .where(
        memory_items.c.session_pk == _SESSION_PK,
        memory_items.c.kind == OBSERVATION,
        memory_items.c.item_id == bindparam("oid"),
    )
    .values(dropped_ord=bindparam("dropped"), pending=False)
)
_CLEAR_ITEMS = delete(memory_items).where(memory_items.c.session_pk == _SESSION_PK)
_CLEAR_SNAPSHOT = delete(snapshots).where(snapshots.c.session_pk == _SESSION_PK)
_INSERT_ITEMS = insert(memory_items)
# First writer wins: an id already stored keeps its row (its ord is simply unused). RETURNING
# makes SQLAlchemy send a batch as one multi-row statement instead of an executemany of one
# statement per row: SQLite's FTS5 writes a new index segment at the end of every statement
# that touched it (through the memory_items trigger), a flush's observations one each.
_INSERT_NEW_ITEMS = FastStatement(
    lite_insert(memory_items)
    .on_conflict_do_nothing(index_elements=["session_pk", "kind", "item_id"])
    .returning(memory_items.c.item_id),
    postgresql=pg_insert(memory_items)
    .on_conflict_do_nothing(index_elements=["session_pk", "kind", "item_id"])
    .returning(memory_items.c.item_id),
)
_SNAPSHOT_VALUES: dict[str, BindParameter[Any]] = {
    name: bindparam(f"new_{name}") for name in SNAPSHOT_FIELDS
}
_UPDATE_SNAPSHOT = FastStatement(
    update(snapshots).where(snapshots.c.session_pk == _SESSION_PK).values(**_SNAPSHOT_VALUES)
)
_INSERT_SNAPSHOT = FastStatement(
    insert(snapshots).values(session_pk=_SESSION_PK, **_SNAPSHOT_VALUES)
)


class ItemWriter:
    """Applies memory records to a session's item rows, by the rules of ``om_core``'s fold.

    First writer wins for an id; a reflection record clears ``pending``; a drop marks known
    active observations in drop order; a resumable compaction snapshot replaces everything.
    Each record costs a few statements, whatever the number of rows already there.
    """

    def __init__(self, connection: Connection, session_pk: int, base: Snapshot | None) -> None:
        self._connection = connection
        self._pk = session_pk
        self.next_ord = base.next_ord if base is not None else 0
        self.observation_cursor = base.observation_cursor if base is not None else None
        self.reflection_cursor = base.reflection_cursor if base is not None else None

    def apply(self, entry: SessionEntry) -> None:
        """Fold one memory entry (anything else changes nothing)."""
        folded = parse_snapshot(entry)
        if folded is not None and folded.resumable:
            self.reset(ledger_from_snapshot(folded))
            return
        record = parse_record(entry)
        if isinstance(record, ObservationsRecorded):
            self._insert(OBSERVATION, record.observations)
            if record.covers_up_to_id is not None:
                self.observation_cursor = record.covers_up_to_id
        elif record is not None and not isinstance(record, ObservationsDropped):
            self._insert(REFLECTION, record.reflections)
            self._connection.execute(_REFLECTED, {"session": self._pk})
            if record.covers_up_to_id is not None:
                self.reflection_cursor = record.covers_up_to_id
        elif record is not None:
            self._drop(record.observation_ids)

    def reset(self, ledger: ObservationalMemoryLedger) -> None:
        """Replace every row with the items of ``ledger``."""
        self._connection.execute(_CLEAR_ITEMS, {"session": self._pk})
        self.next_ord = 0
        pending = set(ledger.pending_reflection_observation_ids)
        rows = [self._row(OBSERVATION, o, pending=o.id in pending) for o in ledger.observations] + [
            self._row(REFLECTION, r, pending=False) for r in ledger.reflections
        ]
        if rows:
            self._connection.execute(_INSERT_ITEMS, rows)
        self._drop(ledger.dropped_observation_ids)
        self.observation_cursor = ledger.observation_covers_up_to_id
        self.reflection_cursor = ledger.reflection_covers_up_to_id

    def _row(self, kind: str, item: Observation | Reflection, *, pending: bool) -> dict[str, Any]:
        row = {
            "session_pk": self._pk,
            "kind": kind,
            "item_id": item.id,
            "ord": self.next_ord,
            "payload": item.to_json_dict(),
            "pending": pending,
            "dropped_ord": None,
        }
        self.next_ord += 1
        return row

    def _active(self, ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(ids), _IN_CHUNK):
            params = {"session": self._pk, "ids": list(ids[start : start + _IN_CHUNK])}
            found.update(self._connection.execute(_ACTIVE_AMONG, params).scalars())
        return found

    def _insert(self, kind: str, items: Iterable[Observation | Reflection]) -> None:
        fresh: dict[str, Observation | Reflection] = {}
        for item in items:
            fresh.setdefault(item.id, item)
        if not fresh:
            return
        rows = [self._row(kind, item, pending=kind == OBSERVATION) for item in fresh.values()]
        _INSERT_NEW_ITEMS.insert_rows(self._connection, rows)

    def _drop(self, observation_ids: Sequence[str]) -> None:
        wanted = list(dict.fromkeys(observation_ids))
        active = self._active(wanted)
        params = []
        for oid in wanted:
            if oid in active:
                params.append({"session": self._pk, "oid": oid, "dropped": self.next_ord})
                self.next_ord += 1
        if params:
            self._connection.execute(_DROP, params)


def advance_memory_state(
    connection: Connection,
    session_pk: int,
    stored: Snapshot | None,
    appended: Sequence[SessionEntry],
    positions: Mapping[str, tuple[int, int]],
    *,
    now: datetime,
) -> int | None:
    """Advance the snapshot over entries just appended straight after the old leaf.

    ``stored`` is the snapshot as read under the write lock; the last of ``appended`` is the
    new leaf; ``positions`` maps entry ids to ``(seq, segment_start)`` and holds the appended
    entries and (when known) the coverage cursors they move to. The stored snapshot (on the
    old branch, so on the new one) stays the base and only the appended memory entries are
    applied: the cost is that of the batch. Returns the branch's unobserved tokens when they
    must be recounted (the cursor moved), ``None`` when the append changed them only by its
    own messages. Call inside the append's write transaction.
    """
    memory = [entry for entry in appended if entry.kind in MEMORY_KINDS]
    if not memory:
        return None
    leaf_id = appended[-1].id
    leaf = (leaf_id, positions[leaf_id][0])
    if stored is not None and stored.scope_map is None:
        return refresh_memory_state(connection, session_pk, leaf_id, now=now)
    writer = ItemWriter(connection, session_pk, stored)
    for entry in memory:
        writer.apply(entry)
    scope_map = fold_work_scope_map(
        memory, initial=stored.scope_map if stored is not None else None
    )
    cursor_at, tokens = _moved_cursor(connection, session_pk, stored, writer, positions, appended)
    _write_snapshot(connection, session_pk, writer, leaf, cursor_at, scope_map, now, stored)
    return tokens


def _moved_cursor(
    connection: Connection,
    session_pk: int,
    stored: Snapshot | None,
    writer: ItemWriter,
    positions: Mapping[str, tuple[int, int]],
    appended: Sequence[SessionEntry],
) -> tuple[int, int | None]:
    """The observation cursor's seq after an append, and the recounted unobserved tokens
    (``None`` when the cursor did not move)."""
    cursor = writer.observation_cursor
    if stored is not None and cursor == stored.observation_cursor:
        return stored.observation_cursor_seq, None
    leaf_id = appended[-1].id
    segment_start, leaf_seq = positions[leaf_id][1], positions[leaf_id][0]
    if cursor is not None and cursor in positions and positions[cursor][0] >= segment_start:
        # The cursor lies in the leaf's own segment: the branch after it is that stretch of seqs.
        cursor_at = positions[cursor][0]
        if cursor_at >= positions[appended[0].id][0] - 1:
            # Nothing but this batch follows the cursor (the usual observer record, appended
            # right after the messages it covers): count the batch instead of the rows.
            return cursor_at, sum(
                estimate_entry_tokens(entry)
                for entry in appended
                if positions[entry.id][0] > cursor_at and is_eligible_observation_source(entry)
            )
        segment = [(segment_start, leaf_seq)]
        return cursor_at, sum_eligible_tokens(connection, session_pk, segment, after_seq=cursor_at)
    segments = branch_segments(connection, session_pk, leaf_id)
    return _unobserved(connection, session_pk, segments, writer)


def refresh_memory_state(
    connection: Connection, session_pk: int, leaf_id: str | None, *, now: datetime
) -> int:
    """Bring the snapshot in line with the branch ending at the leaf; its unobserved tokens.

    Call inside the write transaction that moved the leaf off the straight line (fork,
    explicit parent). Applies only the memory entries after a still-valid snapshot; rebuilds
    the items from the branch's memory entries when the leaf left the snapshot's branch.
    """
    segments = branch_segments(connection, session_pk, leaf_id)
    stored = read_snapshot(connection, session_pk)
    base = valid_snapshot(stored, segments)
    entries = to_entries(
        read_branch_payloads(
            connection,
            session_pk,
            segments,
            after_seq=base.seq if base is not None else 0,
            kinds=MEMORY_KINDS,
        )
    )
    writer = ItemWriter(connection, session_pk, base)
    if base is None and stored is not None:
        writer.reset(fold_ledger(entries))
    else:
        for entry in entries:
            writer.apply(entry)
    cursor_at, tokens = _unobserved(connection, session_pk, segments, writer)
    if entries or base is not None:
        assert leaf_id is not None  # a snapshot or memory entries lie on a branch
        scope_map = fold_work_scope_map(
            entries, initial=base.scope_map if base is not None else None
        )
        leaf = (leaf_id, segments[-1][1])
        _write_snapshot(connection, session_pk, writer, leaf, cursor_at, scope_map, now, stored)
    elif stored is not None:
        connection.execute(_CLEAR_SNAPSHOT, {"session": session_pk})
        connection.execute(_CLEAR_ITEMS, {"session": session_pk})
    return tokens


def _write_snapshot(
    connection: Connection,
    session_pk: int,
    writer: ItemWriter,
    leaf: tuple[str, int],
    cursor_at: int,
    scope_map: WorkScopeMap,
    now: datetime,
    stored: Snapshot | None,
) -> None:
    values = {
        "entry_id": leaf[0],
        "seq": leaf[1],
        "observation_cursor": writer.observation_cursor,
        "observation_cursor_seq": cursor_at,
        "reflection_cursor": writer.reflection_cursor,
        "next_ord": writer.next_ord,
        "scope_map": scope_map.to_json_dict(),
        "updated_at": now,
    }
    params = {"session": session_pk, **{f"new_{name}": value for name, value in values.items()}}
    (_UPDATE_SNAPSHOT if stored is not None else _INSERT_SNAPSHOT).execute(connection, params)


def cursor_seq(
    connection: Connection, session_pk: int, segments: list[Segment], cursor: str | None
) -> int:
    """Seq of the observation cursor on the branch; 0 when there is none or it is off the
    branch (the same rule as ``om_core``'s ``unscanned_entries``: then nothing was scanned)."""
    if cursor is None:
        return 0
    position = entry_position(connection, session_pk, cursor)
    if position is not None and seq_on_branch(position[0], segments):
        return position[0]
    return 0


def _unobserved(
    connection: Connection, session_pk: int, segments: list[Segment], writer: ItemWriter
) -> tuple[int, int]:
    """The cursor's seq and the observable tokens after it on the branch."""
    after_seq = cursor_seq(connection, session_pk, segments, writer.observation_cursor)
    return after_seq, sum_eligible_tokens(connection, session_pk, segments, after_seq=after_seq)
