"""Current-branch reads, over one session's rows only.

A branch is read as a few seq ranges (see ``schema``: one range per segment on the
branch). A recursive query walks from the leaf's segment to its parent's segment and so on to the
root; each step is one primary-key lookup, and the number of steps is the number of forks on the
branch, not the number of entries. Entries are then read by ``(session_pk, seq)`` range, in seq
order, which is branch order because a parent is always appended before its children. The ranges
are fetched first and then bound as parameters of the read, so each read is an index range
scan of one session.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    CTE,
    Connection,
    Select,
    Text,
    and_,
    bindparam,
    cast,
    func,
    or_,
    select,
    true,
)
from sqlalchemy.sql.elements import ColumnElement

from om_core.ledger.models import SessionEntry
from om_workers.store.driver import FastStatement
from om_workers.store.schema import entries

Segment = tuple[int, int]


def segment_cte(session_pk: Any, leaf_id: Any, *, lateral: bool = False) -> CTE:
    """Recursive CTE ``(lo, hi)``: the seq ranges that make up the branch ending at ``leaf_id``.

    Both arguments may be values or ``bindparam`` placeholders. With ``lateral`` (PostgreSQL)
    each step looks its two entries up as ``LATERAL`` subqueries, which the planner can only
    run once per segment, by index: with the plain joins and statistics taken while the
    session was small, it hashed the whole session's entries at every read (47 ms at 700
    entries, growing with the session).
    """
    anchor = select(entries.c.segment_start.label("lo"), entries.c.seq.label("hi")).where(
        entries.c.session_pk == session_pk, entries.c.id == leaf_id
    )
    seg = anchor.cte("branch_segments", recursive=True)
    first = entries.alias("segment_first")
    parent = entries.alias("segment_parent")
    if lateral:
        up = (
            select(first.c.parent_id)
            .where(first.c.session_pk == session_pk, first.c.seq == seg.c.lo)
            .limit(1)
            .lateral("segment_up")
        )
        found = (
            select(parent.c.segment_start, parent.c.seq)
            .where(parent.c.session_pk == session_pk, parent.c.id == up.c.parent_id)
            .limit(1)
            .lateral("segment_found")
        )
        step = select(found.c.segment_start, found.c.seq).select_from(
            seg.join(up, true()).join(found, true())
        )
        return seg.union_all(step)
    step = (
        select(parent.c.segment_start, parent.c.seq)
        .select_from(
            seg.join(first, and_(first.c.session_pk == session_pk, first.c.seq == seg.c.lo)).join(
                parent, parent.c.id == first.c.parent_id
            )
        )
        .where(parent.c.session_pk == session_pk)
    )
    return seg.union_all(step)


def _segments_query(*, lateral: bool) -> Select[Any]:
    seg = segment_cte(bindparam("session_pk"), bindparam("leaf_id"), lateral=lateral)
    return select(seg.c.lo, seg.c.hi).order_by(seg.c.lo)


# Built once: constructing the recursive CTE cost ~4 ms a read (profiled), more than running it.
_SEGMENTS = FastStatement(_segments_query(lateral=False), postgresql=_segments_query(lateral=True))


def branch_segments(connection: Connection, session_pk: int, leaf_id: str | None) -> list[Segment]:
    """The branch's seq ranges, ascending; empty for a session without entries."""
    if leaf_id is None:
        return []
    rows = _SEGMENTS.rows(connection, {"session_pk": session_pk, "leaf_id": leaf_id})
    return [(int(lo), int(hi)) for lo, hi in rows]


def seq_on_branch(seq: int, segments: Sequence[Segment]) -> bool:
    """True when the entry numbered ``seq`` lies on the branch the segments describe."""
    return any(lo <= seq <= hi for lo, hi in segments)


# Ranges per query: keeps each statement small on a branch with many forks.
_RANGES_PER_QUERY = 32


def _range_chunks(segments: Sequence[Segment], after_seq: int) -> list[list[Segment]]:
    """The segments past ``after_seq``, ascending, clipped, grouped for one query each."""
    live = [(max(lo, after_seq + 1), hi) for lo, hi in segments if hi > after_seq]
    return [live[i : i + _RANGES_PER_QUERY] for i in range(0, len(live), _RANGES_PER_QUERY)]


def _in_ranges(ranges: int) -> ColumnElement[bool]:
    # Explicit seq bounds rather than a join against the recursive CTE: both SQLite and
    # PostgreSQL then read each range straight off the (session_pk, seq) index, whatever
    # their statistics say (PostgreSQL otherwise scanned every row past the cursor).
    return and_(
        entries.c.session_pk == bindparam("session_pk"),
        or_(
            *(
                entries.c.seq.between(bindparam(f"lo{i}"), bindparam(f"hi{i}"))
                for i in range(ranges)
            )
        ),
    )


def _range_params(session_pk: int, chunk: Sequence[Segment]) -> dict[str, int]:
    params = {"session_pk": session_pk}
    for i, (lo, hi) in enumerate(chunk):
        params[f"lo{i}"], params[f"hi{i}"] = lo, hi
    return params


# Statements are built once per shape (number of ranges, filters) and then only executed:
# constructing one costs several times more than running it on SQLite.


def _payload_text() -> Any:
    return cast(entries.c.payload, Text).label("payload")


@functools.cache
def _payload_query(ranges: int, kinds: bool, limit: bool, newest_first: bool) -> Select[Any]:
    # The payload comes back as JSON text and is parsed once, by pydantic: decoding it to a
    # dict first and validating that costs about a third more on long branches.
    query = select(entries.c.seq, _payload_text()).where(_in_ranges(ranges))
    if kinds:
        query = query.where(entries.c.kind.in_(bindparam("kinds", expanding=True)))
    query = query.order_by(entries.c.seq.desc() if newest_first else entries.c.seq)
    return query.limit(bindparam("limit")) if limit else query


@functools.cache
def _payload_statement(ranges: int, kinds: bool, limit: bool, newest_first: bool) -> FastStatement:
    if not kinds:
        return FastStatement(_payload_query(ranges, False, limit, newest_first))
    # On SQLite the kinds are one JSON array (a statement compiled once, see
    # om_workers.store.driver); PostgreSQL expands the list.
    listed = select(func.json_each(bindparam("kinds")).table_valued("value").c.value)
    query = select(entries.c.seq, _payload_text()).where(
        _in_ranges(ranges), entries.c.kind.in_(listed)
    )
    query = query.order_by(entries.c.seq.desc() if newest_first else entries.c.seq)
    query = query.limit(bindparam("limit")) if limit else query
    return FastStatement(query, postgresql=_payload_query(ranges, True, limit, newest_first))


@functools.cache
def _tokens_query(ranges: int) -> Select[Any]:
    return select(func.coalesce(func.sum(entries.c.eligible_tokens), 0)).where(_in_ranges(ranges))


def read_branch_payloads(
    connection: Connection,
    session_pk: int,
    segments: Sequence[Segment],
    *,
    after_seq: int = 0,
    limit: int | None = None,
    kinds: Sequence[str] | None = None,
    newest_first: bool = False,
) -> list[Any]:
    """Rows ``(seq, payload)`` (payload as JSON text) of the branch after ``after_seq``, in order
    (SQLAlchemy's rows, or on SQLite :mod:`~om_workers.store.driver`'s named tuples).

    ``segments`` come from :func:`branch_segments`. ``newest_first`` with ``limit`` reads the
    last ``limit`` entries (still returned in branch order).
    """
    chunks = _range_chunks(segments, after_seq)
    if newest_first:
        chunks.reverse()
    rows: list[Any] = []
    for chunk in chunks:
        params: dict[str, Any] = _range_params(session_pk, chunk)
        if limit is not None:
            params["limit"] = limit - len(rows)
        if kinds is not None:
            sqlite = connection.dialect.name == "sqlite"
            params["kinds"] = json.dumps(list(kinds)) if sqlite else list(kinds)
        shape = (len(chunk), kinds is not None, limit is not None, newest_first)
        rows.extend(_payload_statement(*shape).rows(connection, params))
        if limit is not None and len(rows) >= limit:
            break
    if newest_first:
        rows.reverse()
    return rows


def sum_eligible_tokens(
    connection: Connection, session_pk: int, segments: Sequence[Segment], *, after_seq: int
) -> int:
    """Observable-message tokens on the branch after ``after_seq``."""
    total = 0
    for chunk in _range_chunks(segments, after_seq):
        query = _tokens_query(len(chunk))
        total += int(connection.execute(query, _range_params(session_pk, chunk)).scalar_one())
    return total


@functools.cache
def _messages_query(ranges: int) -> Select[Any]:
    eligible = entries.c.eligible_tokens > 0
    return select(
        func.count().filter(eligible), func.coalesce(func.sum(entries.c.eligible_tokens), 0)
    ).where(_in_ranges(ranges))


@functools.cache
def _first_message_query(ranges: int) -> Select[Any]:
    return (
        select(entries.c.id)
        .where(_in_ranges(ranges), entries.c.eligible_tokens > 0)
        .order_by(entries.c.seq)
        .limit(1)
    )


def count_messages(
    connection: Connection,
    session_pk: int,
    segments: Sequence[Segment],
    *,
    after_seq: int,
    before_seq: int,
) -> tuple[int, int, str | None]:
    """Observable messages on the branch strictly between two seqs: how many, their tokens,
    and the oldest one's id (``None`` when there are none)."""
    clipped = [(lo, min(hi, before_seq - 1)) for lo, hi in segments if lo < before_seq]
    count = tokens = 0
    first: str | None = None
    for chunk in _range_chunks(clipped, after_seq):
        params = _range_params(session_pk, chunk)
        found, total = connection.execute(_messages_query(len(chunk)), params).one()
        count, tokens = count + int(found), tokens + int(total)
        if first is None and found:
            first = connection.execute(_first_message_query(len(chunk)), params).scalar()
    return count, tokens, first


_POSITION = select(entries.c.seq, entries.c.segment_start).where(
    entries.c.id == bindparam("entry_id"), entries.c.session_pk == bindparam("session_pk")
)


def entry_position(
    connection: Connection, session_pk: int, entry_id: str
) -> tuple[int, int] | None:
    """``(seq, segment_start)`` of an entry of this session, or ``None`` (another session's too)."""
    row = connection.execute(_POSITION, {"entry_id": entry_id, "session_pk": session_pk}).first()
    return None if row is None else (int(row.seq), int(row.segment_start))


def to_entries(rows: Sequence[Any]) -> tuple[SessionEntry, ...]:
    """Stored payloads (JSON text) back to entries (the payload is the entry's wire form)."""
    return tuple(SessionEntry.model_validate_json(row.payload) for row in rows)
