"""The entry rows: the lookup an append plans with, inserting planned rows, and branch reads.

A branch is read as a few seq ranges (:mod:`om_workers.store.branch`); every statement is
built once (per shape), with bound parameters.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    Connection,
    Select,
    String,
    and_,
    any_,
    bindparam,
    func,
    insert,
    or_,
    select,
)

from om_core.ledger.append_plan import PlannedRow, Position, StoredEntry
from om_core.ledger.models import SessionEntry
from om_workers.store.branch import (
    Segment,
    branch_segments,
    count_messages,
    entry_position,
    read_branch_payloads,
    to_entries,
)
from om_workers.store.driver import FastStatement
from om_workers.store.repositories.sessions import LockedSession
from om_workers.store.schema import entries
from om_workers.store.tail_cache import TailCache


def _in_json_array(name: str) -> Any:
    return entries.c.id.in_(select(func.json_each(bindparam(name)).table_valued("value").c.value))


def _in_array(name: str) -> Any:
    return entries.c.id == any_(bindparam(name, type_=ARRAY(String)))


def _lookup(listed: Callable[[str], Any]) -> Select[Any]:
    """The batch's ids anywhere in the tenant (idempotency, conflicts) and the entries of this
    session the batch refers to (parents, the leaf, coverage cursors); ``listed(name)``: an
    entry's id is in the list bound as ``name``."""
    return select(
        entries.c.id,
        entries.c.session_pk,
        entries.c.seq,
        entries.c.segment_start,
        entries.c.payload,
    ).where(
        or_(
            and_(entries.c.tenant_id == bindparam("tenant_id"), listed("ids")),
            and_(entries.c.session_pk == bindparam("session_pk"), listed("refs")),
        )
    )


# Each list is bound as one value, not one parameter an id, so the statement is compiled once
# (see om_workers.store.driver): a JSON array on SQLite, an array on PostgreSQL (``= ANY``, an
# index probe per id as ``IN`` is).
_LOOKUP = FastStatement(_lookup(_in_json_array), postgresql=_lookup(_in_array))
# RETURNING makes SQLAlchemy send a batch as multi-row statements ("insertmanyvalues", up to
# 1,000 rows each) instead of an executemany of one statement per row.
_INSERT = FastStatement(insert(entries).returning(entries.c.seq))


class EntryRepository:
    """A tenant's entry rows, on one unit of work's connection."""

    def __init__(self, connection: Connection, tails: TailCache | None = None) -> None:
        self._connection = connection
        self._tails = tails if tails is not None else TailCache()

    def look_up(
        self, session: LockedSession, ids: Sequence[str], refs: Sequence[str]
    ) -> tuple[dict[str, StoredEntry], dict[str, Position]]:
        """The ``ids`` already stored (in any session of the tenant), and the positions of the
        ``refs`` that are entries of this session: what
        :func:`~om_core.ledger.append_plan.plan_append` takes. One statement, each list bound
        as one value."""
        stored: dict[str, StoredEntry] = {}
        positions: dict[str, Position] = {}
        batch, wanted = set(ids), set(refs)
        params = {
            "tenant_id": session.tenant_id,
            "ids": list(ids),
            "session_pk": session.pk,
            "refs": list(refs),
        }
        for row in self._rows_of_lookup(params):
            in_session = int(row.session_pk) == session.pk
            if row.id in batch:
                stored[row.id] = StoredEntry(
                    in_session, int(row.seq), int(row.segment_start), row.payload
                )
            if row.id in wanted and in_session:
                positions[row.id] = (int(row.seq), int(row.segment_start))
        return stored, positions

    def _rows_of_lookup(self, params: dict[str, Any]) -> Sequence[Any]:
        if self._connection.dialect.name == "sqlite":
            params = {**params, **{name: json.dumps(params[name]) for name in ("ids", "refs")}}
        return _LOOKUP.rows(self._connection, params)

    def insert(self, session: LockedSession, rows: Sequence[PlannedRow], *, now: datetime) -> None:
        """Insert planned rows into the session, in multi-row statements of up to 1,000 rows.

        Not one statement per row: SQLite's FTS5 writes its pending terms out as a new index
        segment at the end of every statement that touched it (through the ``entries``
        trigger), so a statement per row made a segment per message and the index cost an
        append about as much as everything else did."""
        values = [
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
            for row in rows
        ]
        _INSERT.insert_rows(self._connection, values)

    def position(self, session_pk: int, entry_id: str) -> Position | None:
        """``(seq, segment_start)`` of an entry of this session (``None``: not in it)."""
        return entry_position(self._connection, session_pk, entry_id)

    def segments(self, session_pk: int, leaf_id: str | None) -> list[Segment]:
        """The seq ranges of the branch ending at ``leaf_id``, ascending (empty: no leaf)."""
        return branch_segments(self._connection, session_pk, leaf_id)

    def read(
        self,
        session_pk: int,
        segments: Sequence[Segment],
        *,
        after_seq: int = 0,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> tuple[SessionEntry, ...]:
        """The branch's entries after ``after_seq``, in branch order; with ``newest_first``
        and ``limit``, the last ``limit`` of them (see
        :func:`~om_workers.store.branch.read_branch_payloads`)."""
        rows = read_branch_payloads(
            self._connection,
            session_pk,
            segments,
            after_seq=after_seq,
            limit=limit,
            newest_first=newest_first,
        )
        return to_entries(rows)

    def page(
        self, session_pk: int, segments: Sequence[Segment], after_seq: int, limit: int
    ) -> tuple[int, tuple[SessionEntry, ...]]:
        """Up to ``limit`` branch entries after ``after_seq``, in branch order, and the seq of
        the last one (``after_seq`` when there are none): one keyset page."""
        rows = read_branch_payloads(
            self._connection, session_pk, segments, after_seq=after_seq, limit=limit
        )
        return (int(rows[-1].seq) if rows else after_seq), to_entries(rows)

    def tail(
        self,
        session_pk: int,
        segments: Sequence[Segment],
        limit: int,
        rewritten_at: datetime | None = None,
    ) -> tuple[SessionEntry, ...]:
        """The last ``limit`` entries of the branch, in branch order: :meth:`read` with
        ``newest_first``, reading only what was appended since this process last read the
        session's tail (:class:`~om_workers.store.tail_cache.TailCache`) unless the session
        was rewritten since (``rewritten_at``, the session row's)."""
        return self._tails.tail(self._connection, session_pk, segments, limit, rewritten_at)

    def cache_continued(self, session_pk: int, leaf_id: str, rows: Sequence[PlannedRow]) -> None:
        """Tell the tail cache that ``rows`` were committed after the leaf ``leaf_id`` (see
        :meth:`~om_workers.store.tail_cache.TailCache.continued`)."""
        self._tails.continued(session_pk, leaf_id, rows)

    def tail_and_seqs(
        self,
        session_pk: int,
        segments: Sequence[Segment],
        limit: int,
        rewritten_at: datetime | None = None,
    ) -> tuple[tuple[SessionEntry, ...], tuple[int, ...]]:
        """:meth:`tail`, and its entries' seqs (ascending)."""
        return self._tails.tail_and_seqs(
            self._connection, session_pk, segments, limit, rewritten_at
        )

    def count_messages(
        self, session_pk: int, segments: Sequence[Segment], *, after_seq: int, before_seq: int
    ) -> tuple[int, int, str | None]:
        """Observable messages on the branch strictly between two seqs: how many, their
        tokens, the oldest one's id."""
        return count_messages(
            self._connection, session_pk, segments, after_seq=after_seq, before_seq=before_seq
        )
