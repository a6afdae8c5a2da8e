"""Current-branch reads, over one session's rows only.

A branch is read as a few seq ranges (see ``schema``: one range per run on the branch). A
recursive query walks from the leaf's run to its parent's run and so on to the root; each step
is one primary-key lookup, and the number of steps is the number of forks on the branch, not
the number of entries. Entries are then read by ``(session_pk, seq)`` range, in seq order,
which is branch order because a parent is always appended before its children.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import CTE, Connection, Row, Text, and_, cast, func, select
from sqlalchemy.sql.elements import ColumnElement

from om_core.models import SessionEntry
from om_workers.store.schema import entries

Segment = tuple[int, int]
MEMORY_KINDS: tuple[str, ...] = ("custom", "compaction")
"""Entry kinds the ledger fold reads; every other kind leaves the ledger as it is."""


def segment_cte(session_pk: int, leaf_id: str) -> CTE:
    """Recursive CTE ``(lo, hi)``: the seq ranges that make up the branch ending at ``leaf_id``."""
    anchor = select(entries.c.run_start.label("lo"), entries.c.seq.label("hi")).where(
        entries.c.session_pk == session_pk, entries.c.id == leaf_id
    )
    seg = anchor.cte("branch_segments", recursive=True)
    first = entries.alias("run_first")
    parent = entries.alias("run_parent")
    step = (
        select(parent.c.run_start, parent.c.seq)
        .select_from(
            seg.join(first, and_(first.c.session_pk == session_pk, first.c.seq == seg.c.lo)).join(
                parent, parent.c.id == first.c.parent_id
            )
        )
        .where(parent.c.session_pk == session_pk)
    )
    return seg.union_all(step)


def branch_segments(connection: Connection, session_pk: int, leaf_id: str | None) -> list[Segment]:
    """The branch's seq ranges, ascending; empty for a session without entries."""
    if leaf_id is None:
        return []
    seg = segment_cte(session_pk, leaf_id)
    rows = connection.execute(select(seg.c.lo, seg.c.hi).order_by(seg.c.lo)).all()
    return [(int(lo), int(hi)) for lo, hi in rows]


def seq_on_branch(seq: int, segments: Sequence[Segment]) -> bool:
    """True when the entry numbered ``seq`` lies on the branch the segments describe."""
    return any(lo <= seq <= hi for lo, hi in segments)


def _branch_select(
    session_pk: int,
    leaf_id: str,
    *columns: ColumnElement[Any],
    after_seq: int = 0,
    kinds: Sequence[str] | None = None,
) -> Any:
    seg = segment_cte(session_pk, leaf_id)
    query = (
        select(*columns)
        .select_from(
            seg.join(
                entries,
                and_(
                    entries.c.session_pk == session_pk,
                    entries.c.seq >= seg.c.lo,
                    entries.c.seq <= seg.c.hi,
                ),
            )
        )
        .where(entries.c.seq > after_seq)
    )
    if kinds is not None:
        query = query.where(entries.c.kind.in_(list(kinds)))
    return query


def read_branch_payloads(
    connection: Connection,
    session_pk: int,
    leaf_id: str | None,
    *,
    after_seq: int = 0,
    limit: int | None = None,
    kinds: Sequence[str] | None = None,
    newest_first: bool = False,
) -> list[Row[Any]]:
    """Rows ``(seq, payload)`` (payload as JSON text) of the branch after ``after_seq``, in order.

    ``newest_first`` with ``limit`` reads the last ``limit`` entries (returned in branch order).
    """
    if leaf_id is None:
        return []
    # The payload comes back as JSON text and is parsed once, by pydantic: decoding it to a
    # dict first and validating that costs about a third more on long branches.
    payload = cast(entries.c.payload, Text).label("payload")
    query = _branch_select(
        session_pk, leaf_id, entries.c.seq, payload, after_seq=after_seq, kinds=kinds
    )
    query = query.order_by(entries.c.seq.desc() if newest_first else entries.c.seq)
    if limit is not None:
        query = query.limit(limit)
    rows: list[Row[Any]] = list(connection.execute(query).all())
    if newest_first:
        rows.reverse()
    return rows


def sum_eligible_tokens(
    connection: Connection, session_pk: int, leaf_id: str | None, *, after_seq: int
) -> int:
    """Observable-message tokens on the branch after ``after_seq``."""
    if leaf_id is None:
        return 0
    query = _branch_select(
        session_pk,
        leaf_id,
        func.coalesce(func.sum(entries.c.eligible_tokens), 0),
        after_seq=after_seq,
    )
    return int(connection.execute(query).scalar_one())


def entry_position(
    connection: Connection, session_pk: int, entry_id: str
) -> tuple[int, int] | None:
    """``(seq, run_start)`` of an entry of this session, or ``None`` (also for other sessions)."""
    row = connection.execute(
        select(entries.c.seq, entries.c.run_start).where(
            entries.c.id == entry_id, entries.c.session_pk == session_pk
        )
    ).first()
    return None if row is None else (int(row.seq), int(row.run_start))


def to_entries(rows: Sequence[Row[Any]]) -> tuple[SessionEntry, ...]:
    """Stored payloads (JSON text) back to entries (the payload is the entry's wire form)."""
    return tuple(SessionEntry.model_validate_json(row.payload) for row in rows)
