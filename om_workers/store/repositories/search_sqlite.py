"""SQLite's ranked candidates: the keys of the best rows, from FTS5 tables of levelled terms.

Each row of ``entries_fts`` and ``memory_fts`` holds one term per stem of its text, naming the
stem's weight level (:mod:`om_core.read.search_terms`). A search reads how many rows hold each
of the query's stems at each level (``*_vocab``), keeps the stems of highest IDF
(:data:`~om_core.read.search_plan.MAX_SCORED_STEMS`), and then:

- reads the rows of the rarest terms (a rare stem at any level, a common one's rare levels:
  up to :data:`READ_ROWS` rows in all; every term when the scope holds at most
  :data:`SMALL_SCOPE` messages) with their levels, and the levels of the other terms in those
  rows, and scores them;
- takes the rows holding other terms only by combination of levels, best score first
  (:mod:`om_core.read.search_plan`), each combination's rows in row order up to a page, until
  the page is full and the next combination scores below it. Levels the scope lacks, and
  sets of rare stems that no row holds together, are found by one probe each (a statement
  asking for one row), and the combinations holding them skipped.

Memory items are few: they are all scored from their terms. The counts come from
:mod:`~om_workers.store.repositories.search_counts` (a common stem's kept a while, and then
searched at every level). Only keys come back from here; the rows are read for the page
alone.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, text

from om_core.read.search import SearchKey, SearchQuery
from om_core.read.search_plan import (
    MAX_SCORED_STEMS,
    RARE_SHARE,
    Combination,
    EmptySets,
    PlanWord,
    any_of,
    best_keys,
    combinations,
    places,
    quoted,
    read_places,
    rows_held,
)
from om_core.read.search_terms import LEVELS, idf, query_stems, tenant_term, term
from om_workers.store.driver import sqlite_rows
from om_workers.store.repositories.search_counts import (
    Counted,
    count_levels,
    index_rows,
    tenant_rows,
)
from om_workers.store.repositories.search_sql import OF_TENANT, ROW_SHIFT, WITHHELD_ROWS

READ_ROWS = 3_000
"""Rows of the index a search reads and scores one by one: those of its rarest terms (a rare
stem, a common one's rare levels), as many as fit; the rest are taken by combination."""
SMALL_SCOPE = 4_000
"""A scope (a session, or a tenant) of at most this many messages is scored row by row."""
FIRST_BATCH = 8
"""Combinations asked in the first statement; each next statement asks twice as many, up to
:data:`MAX_BATCH` (most searches end within the first)."""
MAX_BATCH = 64
_SESSION_ROWS = text(
    "SELECT coalesce(max(id) - :row_lo + 1, 0) FROM entries_fts_docsize "
    "WHERE id BETWEEN :row_lo AND :row_hi"
)


@dataclass(frozen=True)
class KeyQuery:
    """One search's scope and page: the tenant, the session (``None``: every session of the
    tenant), the cursor's key, and the number of keys wanted."""

    tenant_id: str
    session_pk: int | None
    after: SearchKey | None
    limit: int

    def params(self) -> dict[str, Any]:
        """The bind parameters every statement of this search takes."""
        params: dict[str, Any] = {"tenant_id": self.tenant_id, "limit": self.limit}
        if self.session_pk is not None:
            params["row_lo"] = self.session_pk * ROW_SHIFT
            params["row_hi"] = (self.session_pk + 1) * ROW_SHIFT - 1
            params["session_pk"] = self.session_pk
        return params


@dataclass(frozen=True)
class _Index:
    """One FTS5 table: its name and the key source of its rows."""

    table: str
    source: int


MESSAGES = _Index("entries_fts", 0)
MEMORY = _Index("memory_fts", 1)


@dataclass(frozen=True)
class _Words:
    """The stems a search scores in one index, with their rows, and the index's size."""

    words: tuple[PlanWord, ...]
    counted: tuple[Counted, ...]
    rows: int


class SqliteKeys:
    """The best keys of one search on a SQLite connection (see the module)."""

    def __init__(self, connection: Connection, key_query: KeyQuery) -> None:
        self._connection = connection
        self._query = key_query

    def best(self, query: SearchQuery) -> list[SearchKey]:
        """Up to ``limit`` keys after the cursor's, best first: the scope's messages and
        memory items holding any scored stem of ``query``, tombstoned entries left out."""
        found = query_stems(query.terms)
        return self._page_of([*self._memory(found), *self._messages(found)])

    # -- what the index knows of the query's stems

    def _words(self, index: _Index, found: Sequence[str]) -> _Words:
        rows = index_rows(self._connection, index.table)
        counted = count_levels(self._connection, index.table, found)
        held = [stem for stem in found if counted[stem].documents]
        # The rarest stems (highest IDF), kept in the query's order.
        rarest = set(sorted(held, key=lambda stem: counted[stem].documents)[:MAX_SCORED_STEMS])
        chosen = [(stem, counted[stem]) for stem in held if stem in rarest]
        words = tuple(
            PlanWord(
                stem,
                idf(rows, c.documents),
                tuple(range(LEVELS)) if c.kept else tuple(sorted(c.levels)),
            )
            for stem, c in chosen
        )
        return _Words(words, tuple(c for _, c in chosen), rows)

    # -- the scope

    def _scope_rows(self) -> int:
        if self._query.session_pk is not None:
            return int(self._connection.execute(_SESSION_ROWS, self._query.params()).scalar() or 0)
        return tenant_rows(self._connection, self._query.tenant_id)

    # -- messages

    def _messages(self, found: Sequence[str]) -> list[SearchKey]:
        plan = self._words(MESSAGES, found)
        if not plan.words:
            return []
        scope = self._scope_rows()
        messages = _MessageStatements(self._query, tenant_token=scope < plan.rows / 2)
        counts = [c.levels for c in plan.counted]
        read_at = read_places(plan.words, counts, math.inf if scope <= SMALL_SCOPE else READ_ROWS)
        read = set(read_at)
        dense = self._in_scope(
            messages,
            [
                replace(word, levels=tuple(lv for lv in word.levels if (i, lv) not in read))
                for i, word in enumerate(plan.words)
            ],
        )
        read_terms = [term(plan.words[i].stem, level) for i, level in read_at]
        levels = self._levels(messages, read_at, read_terms)
        if levels:
            self._add_levels(messages, dense, read_terms, levels)
        keys = best_keys(plan.words, levels, MESSAGES.source, self._query.limit, self._query.after)
        combined = [word for word in dense if word.levels]
        if not combined:
            return keys
        documents = {w.stem: c.documents for w, c in zip(plan.words, plan.counted, strict=True)}
        rare = [i for i, w in enumerate(combined) if documents[w.stem] <= RARE_SHARE * plan.rows]
        cores = EmptySets(combined, frozenset(rare))
        return self._by_combination(messages, cores, read_terms, keys)

    def _in_scope(
        self, statements: _MessageStatements, words: Sequence[PlanWord]
    ) -> list[PlanWord]:
        """``words`` at only the levels some row of the scope holds them at (a probe each, in
        one statement): a level the scope lacks would only multiply the combinations."""
        asked = places(words)
        if not asked:
            return list(words)
        probes = [statements.match(quoted(term(words[i].stem, lv))) for i, lv in asked]
        found = self._run(statements.selects(len(probes), probe=True), probes)
        held = {asked[n] for n, _ in found}
        return [
            replace(word, levels=tuple(lv for lv in word.levels if (i, lv) in held))
            for i, word in enumerate(words)
        ]

    def _levels(
        self,
        statements: _MessageStatements,
        read: Sequence[tuple[int, int]],
        terms: Sequence[str],
    ) -> dict[int, int]:
        """The rows holding any of ``terms`` (word ``read[n][0]`` at level ``read[n][1]``),
        each with the levels of the words it holds them of."""
        if not terms:
            return {}
        matches = [statements.match(quoted(t)) for t in terms]
        return rows_held(self._run(statements.selects(len(matches)), matches), read)

    def _add_levels(
        self,
        statements: _MessageStatements,
        dense: Sequence[PlanWord],
        read_terms: Sequence[str],
        held: dict[int, int],
    ) -> None:
        """The levels of the ``dense`` words in the rows of ``held`` (those holding a term
        read row by row), added to each row's."""
        asked = places(dense)
        if not asked:
            return
        read = any_of(read_terms)
        matches = [
            statements.match(f"{quoted(term(dense[i].stem, lv))} AND ({read})") for i, lv in asked
        ]
        found = rows_held(self._run(statements.selects(len(matches)), matches), asked)
        for row, more in found.items():
            if row in held:
                held[row] += more

    def _by_combination(
        self,
        statements: _MessageStatements,
        cores: EmptySets,
        excluded: Sequence[str],
        keys: list[SearchKey],
    ) -> list[SearchKey]:
        """``keys`` with the rows holding only the combined words (``cores.words``; none of
        ``excluded``), taken by combination, best first, until no later one can reach the
        page."""
        after, limit = self._query.after, self._query.limit
        visible = keys
        batch: list[Combination] = []
        size = FIRST_BATCH
        for group in combinations(cores.words):
            rank = -group[0].score
            if after is not None and (
                rank < after.rank or (rank == after.rank and after.source > MESSAGES.source)
            ):
                continue  # every row of the group comes before the cursor
            if not batch and len(visible) >= limit and visible[limit - 1].rank < rank:
                break
            batch.extend(c for c in group if not cores.empty(c))
            if len(batch) >= size:
                visible = self._page_of(
                    [*visible, *self._combined(statements, cores, batch, excluded)]
                )
                batch, size = [], min(2 * size, MAX_BATCH)
        if batch:
            visible = self._page_of([*visible, *self._combined(statements, cores, batch, excluded)])
        return visible

    def _combined(
        self,
        statements: _MessageStatements,
        cores: EmptySets,
        batch: Sequence[Combination],
        excluded: Sequence[str],
    ) -> list[SearchKey]:
        """The keys of ``batch``'s rows, after its combinations holding a set of rare words
        no row of the scope holds together are left out (such sets probed first)."""
        new = cores.unprobed(batch)
        if new:
            probes = [statements.match(cores.match(core)) for core in new]
            found = {n for n, _ in self._run(statements.selects(len(new), probe=True), probes)}
            cores.learn(new, found)
            batch = [c for c in batch if not cores.empty(c)]
        if not batch:
            return []
        after = self._query.after
        # Rows of the cursor's own rank continue after its row.
        resumed = [after is not None and -c.score == after.rank for c in batch]
        sql = statements.selects(len(batch), ordered=True, resumed=resumed)
        matches = [statements.match(c.match(excluded)) for c in batch]
        return [SearchKey(-batch[n].score, 0, row) for n, row in self._run(sql, matches)]

    # -- memory

    def _memory(self, found: Sequence[str]) -> list[SearchKey]:
        plan = self._words(MEMORY, found)
        if not plan.words:
            return []
        asked = places(plan.words)
        session = self._query.session_pk is not None
        select = (
            "SELECT * FROM (SELECT {n} AS n, m.session_pk * "
            f"{ROW_SHIFT} + m.ord AS row FROM memory_fts AS f "
            "JOIN memory_items AS m ON m.rowid = f.rowid "
            f"{'' if session else OF_TENANT.format(pk='m.session_pk')} "
            "WHERE memory_fts MATCH :m{n} "
            f"{'AND m.session_pk = :session_pk' if session else ''})"
        )
        sql = " UNION ALL ".join(select.format(n=n) for n in range(len(asked)))
        matches = [quoted(term(plan.words[i].stem, lv)) for i, lv in asked]
        held = rows_held(self._run(sql, matches), asked)
        return best_keys(plan.words, held, MEMORY.source, self._query.limit, self._query.after)

    def _page_of(self, keys: Iterable[SearchKey]) -> list[SearchKey]:
        """The best ``limit`` of ``keys`` after the cursor's, best first."""
        after = self._query.after
        return heapq.nsmallest(self._query.limit, (k for k in keys if after is None or k > after))

    def _run(self, sql: str, matches: Sequence[str]) -> list[tuple[int, int]]:
        params = {**self._query.params(), **{f"m{n}": m for n, m in enumerate(matches)}}
        if self._query.after is not None:
            params["after_row"] = self._query.after.row
        return sqlite_rows(self._connection, sql, params)


@dataclass(frozen=True)
class _MessageStatements:
    """The statements reading ``entries_fts`` in one search's scope: its session's rowid
    range, or its tenant's sessions (and, for a tenant far smaller than the index, the
    tenant's term in the match), tombstoned entries left out."""

    query: KeyQuery
    tenant_token: bool

    def match(self, expression: str) -> str:
        if self.query.session_pk is None and self.tenant_token:
            return f"{quoted(tenant_term(self.query.tenant_id))} AND ({expression})"
        return expression

    def selects(
        self,
        count: int,
        *,
        ordered: bool = False,
        resumed: Sequence[bool] = (),
        probe: bool = False,
    ) -> str:
        """``count`` selects of ``(n, row)``, the ``n``th matching ``:m{n}``, joined; each
        ``ordered`` one in row order up to ``:limit`` rows, after ``:after_row`` where
        ``resumed``; a ``probe`` finds one row at most, withheld or not."""
        session = self.query.session_pk is not None
        scope = "AND f.rowid BETWEEN :row_lo AND :row_hi" if session else ""
        join = "" if session else OF_TENANT.format(pk=f"f.rowid / {ROW_SHIFT}")
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
