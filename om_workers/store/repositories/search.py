"""Full-text candidates: ranked, keyset-paged pages of messages and memory items.

The index is the database's, of levelled terms (SQLite: FTS5 tables kept by triggers,
migration ``0017``; PostgreSQL: a stored ``tsvector`` column with a GIN index, migration
``0018``), so what was erased, refreshed or never committed is never a candidate. Tenancy and
tombstones are filtered here, in SQL, so a page's ``LIMIT`` counts only rows the caller may
see; the rest of the rules (revoked memory, secrets) are applied by
:mod:`om_workers.store.search` on the page.

Candidates are keyed as :mod:`~om_workers.store.repositories.search_sql` says. The keys of a
page come from :mod:`~om_workers.store.repositories.search_levelled` (best combinations of
levels first, on either store's index), then the page's rows are read by key.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, bindparam, select, text

from om_core.read.search import SearchKey, SearchQuery
from om_workers.store.repositories.search_levelled import (
    KeyQuery,
    LevelledIndex,
    LevelledKeys,
    QueryFacts,
)
from om_workers.store.repositories.search_postgresql import PostgresIndex
from om_workers.store.repositories.search_sql import ROWS
from om_workers.store.repositories.search_sqlite import SqliteIndex
from om_workers.store.schema import memory_items
from om_workers.store.snapshot import OBSERVATION

_OBSERVATIONS = select(memory_items.c.item_id, memory_items.c.payload).where(
    memory_items.c.session_pk == bindparam("session_pk"),
    memory_items.c.kind == OBSERVATION,
    memory_items.c.item_id.in_(bindparam("ids", expanding=True)),
)

# A page: the keys chosen by search_levelled, as literal rows.
_PAGE = "WITH candidates(source, row, rank) AS (VALUES {keys}) " + ROWS


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
        session_pks: Sequence[int] | None,
        after: SearchKey | None,
        limit: int,
    ) -> Sequence[SearchRow]:
        """Up to ``limit`` visible candidates after ``after``, best first: the tenant's (or
        the sessions' of ``session_pks``) messages and memory items matching any term,
        tombstoned entries left out.

        Where the index does not take a set of sessions as one scope (SQLite's, in an index
        far larger than the set), the sessions are searched one by one and their keys
        merged: a key does not depend on the scope its row was found in (stems are weighed
        by the whole index's counts, learnt once for all of them, as the query's stems are),
        so the merge is the tenant's ranking restricted to them. Only the page's rows are
        read."""
        index_type = self._index_type()
        if session_pks is None or (
            len(session_pks) > 1 and index_type.takes_sessions(self._connection, len(session_pks))
        ):
            sessions = None if session_pks is None else tuple(session_pks)
            scope = KeyQuery(tenant_id, None, after, limit, session_pks=sessions)
            return self._page(self._keys(scope, query, QueryFacts()))
        facts = QueryFacts()
        found = (
            self._keys(KeyQuery(tenant_id, pk, after, limit), query, facts) for pk in session_pks
        )
        return self._page(heapq.nsmallest(limit, itertools.chain.from_iterable(found)))

    def _index_type(self) -> type[SqliteIndex | PostgresIndex]:
        return SqliteIndex if self._connection.dialect.name == "sqlite" else PostgresIndex

    def _keys(self, key_query: KeyQuery, query: SearchQuery, facts: QueryFacts) -> list[SearchKey]:
        index: LevelledIndex = self._index_type()(self._connection, key_query)
        return LevelledKeys(index, key_query, facts).best(query)

    def _page(self, keys: Sequence[SearchKey]) -> list[SearchRow]:
        """The stored rows of ``keys``, in key order."""
        if not keys:
            return []
        values = ", ".join(f"(:s{n}, :w{n}, :r{n})" for n in range(len(keys)))
        params: dict[str, Any] = {}
        for n, key in enumerate(keys):
            params.update({f"s{n}": key.source, f"w{n}": key.row, f"r{n}": key.rank})
        return self._rows(_PAGE.format(keys=values), params)

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
