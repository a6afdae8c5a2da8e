"""SQLite's index of levelled terms: FTS5 tables (``entries_fts``, ``memory_fts``) whose rows
hold one term per stem of their text (``stem_level``), keyed by the candidate row.

A search's plan is :mod:`~om_workers.store.repositories.search_levelled`'s; this module
writes its statements as FTS5 matches. FTS5 gives a match's rows in rowid order (the
candidate's row) and can stop after a page, so each combination costs about its page. The
counts come from :mod:`~om_workers.store.repositories.search_counts` (FTS5's own, a common
stem's kept a while, and then searched at every level).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from om_core.read.search import SearchQuery
from om_core.read.search_plan import FTS5, Combination, rows_held
from om_core.read.search_terms import query_stems, tenant_term
from om_workers.store.driver import sqlite_rows
from om_workers.store.repositories.search_counts import (
    SESSION_ROWS,
    count_levels,
    index_rows,
    tenant_rows,
)
from om_workers.store.repositories.search_levelled import (
    MEMORY,
    MESSAGES,
    IndexCounts,
    KeyQuery,
    MessageStatements,
)
from om_workers.store.repositories.search_sql import OF_TENANT, ROW_SHIFT, WITHHELD_ROWS

_SESSIONS_ROWS = "SELECT coalesce(sum(entry_count), 0) FROM sessions WHERE pk IN ({pks})"
_TABLES = {MESSAGES: "entries_fts", MEMORY: "memory_fts"}
SET_ROWS_PER_SESSION = 2_000
"""A set of sessions is searched as one scope while the messages' index holds at most this
many rows a session of the set (see :meth:`SqliteIndex.takes_sessions`)."""
_MEMORY_SELECT = (
    "SELECT * FROM (SELECT {n} AS n, m.session_pk * "
    f"{ROW_SHIFT} + m.ord AS row FROM memory_fts AS f "
    "JOIN memory_items AS m ON m.rowid = f.rowid {tenant} "
    "WHERE memory_fts MATCH :m{n} {session})"
)


class SqliteIndex:
    """The FTS5 index on one search's connection and scope (a
    :class:`~om_workers.store.repositories.search_levelled.LevelledIndex`)."""

    syntax = FTS5
    reads_sets = False
    """FTS5 answers a combination from its doclists in about the time a probe takes."""
    first_batch = 8
    small_share = 0.0
    """FTS5 reads a combination's rows within the scope's rowids: it costs by the scope."""

    def __init__(self, connection: Connection, key_query: KeyQuery) -> None:
        self._connection = connection
        self._query = key_query

    @classmethod
    def takes_sessions(cls, connection: Connection, count: int) -> bool:
        """Whether a set of ``count`` sessions is one scope, whose statements keep each
        matching row by its session: while the index holds at most
        :data:`SET_ROWS_PER_SESSION` rows a session, so a term's rows index-wide are few
        beside the set. Else each session is searched alone: FTS5 narrows a match by one
        rowid range only, and an ``OR`` of ranges, or a table of them joined to the match,
        cost more than a search a session (measured: docs/search.md)."""
        return index_rows(connection, _TABLES[MESSAGES]) <= SET_ROWS_PER_SESSION * count

    def stems(self, query: SearchQuery) -> list[str]:
        return query_stems(query.terms)

    def counts(self, source: int, stems: Sequence[str]) -> IndexCounts:
        table = _TABLES[source]
        rows = index_rows(self._connection, table)
        return IndexCounts(rows, count_levels(self._connection, table, stems))

    def scope_rows(self) -> int:
        if self._query.session_pk is not None:
            # On the driver: through SQLAlchemy this one-row read cost several times SQLite's
            # work, once for every session of a narrowed search.
            ((rows,),) = sqlite_rows(self._connection, SESSION_ROWS, self._query.params())
            return int(rows or 0)
        if self._query.session_pks is not None:
            sql = _SESSIONS_ROWS.format(pks=_listed(self._query.session_pks))
            ((rows,),) = sqlite_rows(self._connection, sql, {})
            return int(rows)
        return tenant_rows(self._connection, self._query.tenant_id)

    def messages(self, *, tenant_term: bool) -> _MessageStatements:
        return _MessageStatements(self._query, tenant_token=tenant_term)

    def held(
        self,
        statements: MessageStatements,
        within: Sequence[Sequence[str]],
        asked: Sequence[tuple[int, int]],
        terms: Sequence[str],
        *,
        by_scope: bool = False,
        limit: int | None = None,
    ) -> dict[int, int]:
        # One match per asked term: FTS5 answers each from its own doclist, within the
        # scope's rowids, whatever the scope's size (and reads every row: no limit).
        single = set(within[0]) if len(within) == 1 else set()
        holding = FTS5.all_of(map(FTS5.any_of, within))
        matches = [
            statements.match(
                FTS5.quote(t) if t in single else FTS5.all_of([FTS5.quote(t), holding])
            )
            for t in terms
        ]
        params = {**self._query.params(), **{f"m{n}": m for n, m in enumerate(matches)}}
        return rows_held(self.rows(statements.selects(len(matches)), params), asked)

    def memory_selects(self, count: int) -> str:
        pks = self._query.session_pks
        if self._query.session_pk is not None:
            tenant, where = "", "AND m.session_pk = :session_pk"
        elif pks is not None:
            tenant, where = "", f"AND m.session_pk IN ({_listed(pks)})"
        else:
            tenant, where = OF_TENANT.format(pk="m.session_pk"), ""
        return " UNION ALL ".join(
            _MEMORY_SELECT.format(n=n, tenant=tenant, session=where) for n in range(count)
        )

    def rows(self, sql: str, params: dict[str, Any]) -> list[tuple[int, int]]:
        return sqlite_rows(self._connection, sql, params)


def _listed(pks: Sequence[int]) -> str:
    """Session keys written into a statement: integers the store read, never a caller's text
    (the driver binds no lists)."""
    return ", ".join(str(int(pk)) for pk in pks)


@dataclass(frozen=True)
class _MessageStatements:
    """The statements reading ``entries_fts`` in one search's scope: its session's rowid
    range, a set of sessions (each row of a match kept by its session), or its tenant's
    sessions (and, for a tenant far smaller than the index, the tenant's term in the
    match), tombstoned entries left out."""

    query: KeyQuery
    tenant_token: bool

    def match(self, expression: str) -> str:
        tenant_wide = self.query.session_pk is None and self.query.session_pks is None
        if tenant_wide and self.tenant_token:
            return FTS5.all_of([FTS5.quote(tenant_term(self.query.tenant_id)), expression])
        return expression

    def combinations(
        self, batch: Sequence[Combination], excluded: Sequence[str], resumed: Sequence[bool]
    ) -> tuple[str, dict[str, str]]:
        sql = self.selects(len(batch), ordered=True, resumed=resumed)
        return sql, {f"m{n}": self.match(c.match(FTS5, excluded)) for n, c in enumerate(batch)}

    def selects(
        self,
        count: int,
        *,
        ordered: bool = False,
        resumed: Sequence[bool] = (),
        probe: bool = False,
    ) -> str:
        join, scope = self._scope()
        parts = []
        for n in range(count):
            resume = "AND f.rowid > :after_row" if n < len(resumed) and resumed[n] else ""
            order = "ORDER BY f.rowid LIMIT :limit" if ordered else ""
            visible = "" if probe else "AND f.rowid NOT IN (SELECT row FROM withheld)"
            parts.append(
                f"SELECT * FROM (SELECT {n} AS n, f.rowid AS row FROM entries_fts AS f {join} "
                f"WHERE entries_fts MATCH :m{n} {scope} {resume} {visible} "
                f"{'LIMIT 1' if probe else order})"
            )
        joined = " UNION ALL ".join(parts)
        return joined if probe else f"WITH withheld(row) AS MATERIALIZED ({WITHHELD_ROWS}) {joined}"

    def _scope(self) -> tuple[str, str]:
        """The join and the condition keeping a select's rows to the scope."""
        if self.query.session_pk is not None:
            return "", "AND f.rowid BETWEEN :row_lo AND :row_hi"
        if self.query.session_pks is not None:
            return "", f"AND f.rowid / {ROW_SHIFT} IN ({_listed(self.query.session_pks)})"
        return OF_TENANT.format(pk=f"f.rowid / {ROW_SHIFT}"), ""
