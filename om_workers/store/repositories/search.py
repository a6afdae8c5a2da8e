"""Full-text candidates: ranked, keyset-paged pages of messages and memory items.

The index is the database's (migration ``0012``: FTS5 tables kept by triggers on SQLite; on
PostgreSQL GIN indexes over the stored lexemes of each row, ``search_terms``, migration
``0016``), so what was erased, refreshed or never committed is never a candidate. Tenancy and
tombstones are filtered here, in SQL, so a page's ``LIMIT`` counts only rows the caller may
see; the rest of the rules (revoked memory, secrets) are applied by
:mod:`om_workers.store.search` on the page.

Candidates are keyed as :mod:`~om_workers.store.repositories.search_sql` says. Neither store
ranks every match of a common word when it can help it: SQLite's keys come from
:mod:`~om_workers.store.repositories.search_sqlite` (BM25 bounds by class of words), then the
page's rows are read by key; PostgreSQL ranks its likeliest rows first
(:mod:`~om_workers.store.repositories.search_postgresql`), each statement returning a whole
page.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, bindparam, select, text

from om_core.read.search import SearchKey, SearchQuery
from om_workers.store.repositories import search_postgresql as postgresql
from om_workers.store.repositories.search_sql import ROWS
from om_workers.store.repositories.search_sqlite import KeyQuery, SqliteKeys
from om_workers.store.schema import memory_items
from om_workers.store.snapshot import OBSERVATION

_OBSERVATIONS = select(memory_items.c.item_id, memory_items.c.payload).where(
    memory_items.c.session_pk == bindparam("session_pk"),
    memory_items.c.kind == OBSERVATION,
    memory_items.c.item_id.in_(bindparam("ids", expanding=True)),
)

# SQLite's page: the keys chosen by search_sqlite, as literal rows.
_SQLITE_PAGE = "WITH candidates(source, row, rank) AS (VALUES {keys}) " + ROWS


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
        if self._connection.dialect.name == "sqlite":
            key_query = KeyQuery(tenant_id, session_pk, after, limit)
            return self._page(SqliteKeys(self._connection, key_query).best(query))
        params: dict[str, Any] = {"tenant_id": tenant_id, "limit": limit, "words": query.text()}
        if session_pk is not None:
            params["session_pk"] = session_pk
        if after is not None:
            params.update(after_rank=after.rank, after_source=after.source, after_row=after.row)
        return self._pg_page(query, params, session=session_pk is not None, after=after is not None)

    def _pg_page(
        self, query: SearchQuery, params: dict[str, Any], *, session: bool, after: bool
    ) -> list[SearchRow]:
        """PostgreSQL's page, its likeliest rows ranked first
        (:mod:`~om_workers.store.repositories.search_postgresql`)."""
        found = self._connection.execute(
            text(postgresql.word_shares_statement(session=session)),
            {**params, "terms": list(query.terms)},
        )
        words, lexemes, scope_rows = postgresql.word_shares(found.mappings().all())
        rows: list[SearchRow] = []
        for step in postgresql.steps(words, lexemes, scope_rows):
            sql = postgresql.page_statement(match=step.match, session=session, after=after)
            rows = self._rows(sql, {**params, "rare_words": step.rare_text(params["words"])})
            if step.settles([-row.key.rank for row in rows], params["limit"]):
                break
        return rows

    def _page(self, keys: Sequence[SearchKey]) -> list[SearchRow]:
        """The stored rows of ``keys``, in key order."""
        if not keys:
            return []
        values = ", ".join(f"(:s{n}, :w{n}, :r{n})" for n in range(len(keys)))
        params: dict[str, Any] = {}
        for n, key in enumerate(keys):
            params.update({f"s{n}": key.source, f"w{n}": key.row, f"r{n}": key.rank})
        return self._rows(_SQLITE_PAGE.format(keys=values), params)

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
