"""Full-text candidates: one ranked, keyset-paged statement over messages and memory items.

The index is the database's (migration ``0012``: FTS5 tables kept by triggers on SQLite,
expression GIN indexes on PostgreSQL), so what was erased, refreshed or never committed is
never a candidate. Tenancy and tombstones are filtered here, in SQL, so a page's ``LIMIT``
counts only rows the caller may see; the rest of the rules (revoked memory, secrets) are
applied by :mod:`om_workers.store.search` on the page.

Every candidate has a key ``(rank, source, row)``: ``rank`` the negated score (lower is
better), ``source`` 0 for a message and 1 for a memory item, ``row`` ``session_pk * 2**32``
plus the entry's ``seq`` or the item's ``ord``. Pages follow that key, so they never overlap.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, bindparam, select, text

from om_core.read.search import SearchKey, SearchQuery
from om_workers.store.repositories.search_bounds import Narrowing, narrowing
from om_workers.store.schema import memory_items
from om_workers.store.snapshot import OBSERVATION

_ROW_SHIFT = 4294967296
_OBSERVATIONS = select(memory_items.c.item_id, memory_items.c.payload).where(
    memory_items.c.session_pk == bindparam("session_pk"),
    memory_items.c.kind == OBSERVATION,
    memory_items.c.item_id.in_(bindparam("ids", expanding=True)),
)

# Rows the tenant's tombstones withhold, as candidate rows: built once per statement (an
# uncorrelated subquery), so filtering a match costs one set lookup, not two index probes.
_WITHHELD_ROWS = """
    SELECT e.session_pk * 4294967296 + e.seq
    FROM tombstones AS t
    JOIN sessions AS ts ON ts.tenant_id = t.tenant_id AND t.scope = 'session:' || ts.id
    JOIN entries AS e
        ON e.tenant_id = t.tenant_id AND e.id = t.entry_id AND e.session_pk = ts.pk
    WHERE t.tenant_id = :tenant_id
"""
# The tenant's sessions, for a tenant-wide search (a session search is its rowid range); a
# session being erased is hidden at once, its rows until the job deletes them.
_OF_TENANT = (
    "JOIN sessions AS s ON s.pk = {pk} AND s.tenant_id = :tenant_id AND s.erased_at IS NULL"
)
_NOT_HIDDEN = """e.session_pk NOT IN (
    SELECT pk FROM sessions WHERE tenant_id = :tenant_id AND erased_at IS NOT NULL)"""
# Scores are rounded so that the narrowed statement's (a difference of two sums) and the full
# one's agree on a key: a cursor from a page of one continues a page of the other.
_SQLITE_ENTRIES = f"""
    SELECT 0 AS source, f.rowid AS row, round(f.rank, 9) AS rank
    FROM entries_fts AS f {{tenant_join}}
    WHERE entries_fts MATCH :match {{session_range}}
        AND f.rowid NOT IN ({_WITHHELD_ROWS})
"""
# Narrowed (see search_bounds): only rows holding a scored word are matched, by ``:match``,
# which names the scored words twice (once to require one, once beside the bounded words), so
# the rank of ``:scored`` (those words alone) is taken off to leave each row's full score.
# Both sides are materialized: a correlated lookup would make FTS5 redo its per-query work
# (the words' document counts) for every row.
_SQLITE_NARROWED = f"""
    SELECT * FROM (
        WITH a AS MATERIALIZED (
            SELECT f.rowid AS row, f.rank AS rank FROM entries_fts AS f {{tenant_join}}
            WHERE entries_fts MATCH :match {{session_range}}
                AND f.rowid NOT IN ({_WITHHELD_ROWS})),
        b AS MATERIALIZED (
            SELECT f.rowid AS row, f.rank AS rank FROM entries_fts AS f
            WHERE entries_fts MATCH :scored {{session_range}})
        SELECT 0 AS source, a.row AS row, round(a.rank - b.rank, 9) AS rank
        FROM a JOIN b ON b.row = a.row)
"""
_SQLITE_MEMORY = """
    SELECT 1 AS source, m.session_pk * 4294967296 + m.ord AS row, round(f.rank, 9) AS rank
    FROM memory_fts AS f JOIN memory_items AS m ON m.rowid = f.rowid {tenant_join}
    WHERE memory_fts MATCH :memory_match {session_filter}
"""
_PG_QUERY = "replace(plainto_tsquery('english'::regconfig, :words)::text, ' & ', ' | ')::tsquery"
_PG_ENTRIES = f"""
    SELECT 0 AS source, e.session_pk * 4294967296 + e.seq AS row,
        -ts_rank(to_tsvector('english'::regconfig, om_message_text(e.payload)), q.q)::float8
            AS rank
    FROM entries AS e, (SELECT {_PG_QUERY} AS q) AS q
    WHERE e.kind = 'message' AND e.tenant_id = :tenant_id {{session_filter}}
        AND to_tsvector('english'::regconfig, om_message_text(e.payload)) @@ q.q
        AND e.session_pk * 4294967296 + e.seq NOT IN ({_WITHHELD_ROWS})
        AND {_NOT_HIDDEN}
"""
_PG_MEMORY = f"""
    SELECT 1 AS source, m.session_pk * 4294967296 + m.ord AS row,
        -ts_rank(to_tsvector('english'::regconfig, m.payload ->> 'text'), q.q)::float8 AS rank
    FROM memory_items AS m {{tenant_join}}, (SELECT {_PG_QUERY} AS q) AS q
    WHERE to_tsvector('english'::regconfig, m.payload ->> 'text') @@ q.q {{session_filter}}
"""
# Only the page's keys are ranked and sorted with the matches; the stored rows (payloads) are
# read for the page alone.
_PAGE = """
    WITH candidates AS (
        SELECT source, row, rank FROM ({entries} UNION ALL {memory}) AS c
        WHERE TRUE {after}
        ORDER BY rank, source, row
        LIMIT :limit)
    SELECT c.source, c.row, c.rank, s.id AS session_id,
        e.id AS entry_id, e.created_at, e.payload AS entry_payload,
        m.kind AS memory_kind, m.payload AS memory_payload
    FROM candidates AS c
    JOIN sessions AS s ON s.pk = c.row / 4294967296
    LEFT JOIN entries AS e
        ON c.source = 0 AND e.session_pk = c.row / 4294967296 AND e.seq = c.row % 4294967296
    LEFT JOIN memory_items AS m
        ON c.source = 1 AND m.session_pk = c.row / 4294967296 AND m.ord = c.row % 4294967296
    ORDER BY c.rank, c.source, c.row
"""
_AFTER = """AND (rank > :after_rank OR (rank = :after_rank AND (source > :after_source
    OR (source = :after_source AND row > :after_row))))"""


_INDEXED_MESSAGES = text("SELECT block FROM entries_fts_data WHERE id = 1")
_DOCUMENTS = text("SELECT term, doc FROM entries_fts_vocab WHERE term IN :terms").bindparams(
    bindparam("terms", expanding=True)
)


def _varint(block: bytes) -> int:
    """SQLite's varint at the start of ``block`` (big-endian 7-bit groups; a 9th byte is whole)."""
    value = 0
    for byte in block[:8]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value
    return (value << 8) | block[8]


@dataclass(frozen=True)
class _Vocabulary:
    """What the index says of a query's words: how many messages are indexed, and how many
    hold each word found in the vocabulary as written."""

    messages: int
    documents: dict[str, int]


def _vocabulary(connection: Connection, query: SearchQuery) -> _Vocabulary:
    block = connection.execute(_INDEXED_MESSAGES).scalar()
    if not block:
        return _Vocabulary(0, {})
    rows = connection.execute(_DOCUMENTS, {"terms": list(query.terms)})
    return _Vocabulary(_varint(bytes(block)), {str(row.term): int(row.doc) for row in rows})


def _informative(query: SearchQuery, vocabulary: _Vocabulary) -> SearchQuery:
    """``query`` without the words in half the indexed messages or more, when another word is
    known to match: FTS5's BM25 floors such a word's IDF to 1e-6, so it adds nothing to a
    score, while matching it costs a score for most rows of the index. The vocabulary holds
    stems, so a word not found there (stemmed differently, or absent) is kept but is no proof
    of a match; then the query stays whole."""
    counts, half = vocabulary.documents, vocabulary.messages / 2
    if not vocabulary.messages:
        return query
    kept = tuple(term for term in query.terms if counts.get(term, 0) < half)
    if any(counts.get(term, 0) > 0 for term in kept):
        return SearchQuery(kept)
    return query


@dataclass(frozen=True)
class SearchRow:
    """One candidate: its key, its session, and the stored row it names (an entry's id, time
    and payload, or a memory item's kind and payload)."""

    key: SearchKey
    session_id: str
    entry_id: str | None
    created_at: datetime | None
    entry_payload: dict[str, Any] | None
    memory_kind: str | None
    memory_payload: dict[str, Any] | None


def _statement(dialect: str, *, session: bool, after: bool, narrowed: bool = False) -> str:
    memory_filter = "AND m.session_pk = :session_pk" if session else ""
    memory_tenant = "" if session else _OF_TENANT.format(pk="m.session_pk")
    if dialect == "sqlite":
        entries = (_SQLITE_NARROWED if narrowed else _SQLITE_ENTRIES).format(
            session_range="AND f.rowid BETWEEN :row_lo AND :row_hi" if session else "",
            tenant_join="" if session else _OF_TENANT.format(pk="f.rowid / 4294967296"),
        )
        memory = _SQLITE_MEMORY.format(session_filter=memory_filter, tenant_join=memory_tenant)
    else:
        entries = _PG_ENTRIES.format(
            session_filter="AND e.session_pk = :session_pk" if session else ""
        )
        memory = _PG_MEMORY.format(session_filter=memory_filter, tenant_join=memory_tenant)
    return _PAGE.format(entries=entries, memory=memory, after=_AFTER if after else "")


def _json(value: Any) -> dict[str, Any] | None:
    # A text statement gets SQLite's JSON as the stored string; psycopg decodes JSONB itself.
    if value is None or isinstance(value, dict):
        return value
    loaded = json.loads(value)
    return loaded if isinstance(loaded, dict) else None


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def row_from_result(row: Any) -> SearchRow:
    """A candidate from a result row holding the columns of a page statement (``source``,
    ``row``, ``rank``, the session id and the entry's or memory item's columns)."""
    return SearchRow(
        key=SearchKey(float(row.rank), int(row.source), int(row.row)),
        session_id=row.session_id,
        entry_id=row.entry_id,
        created_at=_time(row.created_at),
        entry_payload=_json(row.entry_payload),
        memory_kind=row.memory_kind,
        memory_payload=_json(row.memory_payload),
    )


def _narrowed_matches(tenant: str, plan: Narrowing) -> dict[str, str]:
    scored, every = plan.scored.fts5(), f"{plan.scored.fts5()} OR {plan.bounded.fts5()}"
    return {
        "match": f"{tenant}body : (({scored}) AND ({every}))",
        "scored": f"{tenant}body : ({scored})",
    }


def _exact(rows: Sequence[SearchRow], plan: Narrowing, limit: int) -> bool:
    """Whether a narrowed page is the full query's: it is full, and its last row scores above
    anything a row holding bounded words alone could (with room for the rounding)."""
    return len(rows) == limit and rows[-1].key.rank < -plan.bound - 1e-6


class SearchRepository:
    """Ranked full-text candidates of a tenant, on one unit of work's connection."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def candidates(
        self,
        tenant_id: str,
        query: SearchQuery,
        *,
        session_pk: int | None,
        after: SearchKey | None,
        limit: int,
    ) -> Sequence[SearchRow]:
        """Up to ``limit`` visible candidates after ``after``, best first: the tenant's (or
        one session's, by ``session_pk``) messages and memory items matching any term,
        tombstoned entries left out."""
        dialect = self._connection.dialect.name
        params: dict[str, Any] = {"tenant_id": tenant_id, "limit": limit}
        if session_pk is not None:
            params.update(
                session_pk=session_pk,
                row_lo=session_pk * _ROW_SHIFT,
                row_hi=(session_pk + 1) * _ROW_SHIFT - 1,
            )
        if after is not None:
            params.update(after_rank=after.rank, after_source=after.source, after_row=after.row)
        shape = {"session": session_pk is not None, "after": after is not None}
        if dialect != "sqlite":
            params["words"] = query.text()
            return self._rows(_statement(dialect, **shape), params)
        # Words match the text column only; a tenant-wide search ANDs in the tenant's token.
        tenant = f'tenant : "{tenant_id.encode().hex()}" AND ' if session_pk is None else ""
        params["memory_match"] = query.fts5()
        vocabulary = _vocabulary(self._connection, query)
        words = _informative(query, vocabulary)
        plan = narrowing(words, vocabulary.documents, vocabulary.messages)
        if plan is not None:
            rows = self._rows(
                _statement(dialect, **shape, narrowed=True),
                {**params, **_narrowed_matches(tenant, plan)},
            )
            if _exact(rows, plan, limit):
                return rows
        params["match"] = f"{tenant}body : ({words.fts5()})"
        return self._rows(_statement(dialect, **shape), params)

    def _rows(self, sql: str, params: dict[str, Any]) -> list[SearchRow]:
        return [row_from_result(row) for row in self._connection.execute(text(sql), params)]

    def observation_sources(self, session_pk: int, ids: Sequence[str]) -> dict[str, list[str]]:
        """The source entry ids of the session's observations among ``ids`` (unknown ids are
        left out)."""
        rows = self._connection.execute(_OBSERVATIONS, {"session_pk": session_pk, "ids": list(ids)})
        found: dict[str, list[str]] = {}
        for row in rows:
            payload = _json(row.payload) or {}
            found[row.item_id] = [str(i) for i in payload.get("sourceEntryIds", ())]
        return found
