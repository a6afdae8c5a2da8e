"""PostgreSQL's index of levelled terms: each row's ``search_levels`` (migration ``0018``), a
``tsvector`` of ``lexeme_level`` terms with a GIN index.

A search's plan is :mod:`~om_workers.store.repositories.search_levelled`'s; this module
writes its statements as ``tsquery`` matches. The stems are PostgreSQL's own (``english``
lexemes, stop words left out), so a query's words meet the rows' as ``to_tsvector`` made them.

**Counts.** PostgreSQL has no cheap count of a lexeme's rows (a GIN index finds them, and
counting reads each one's heap tuple: a third of a second for a lexeme in 280,000 rows).
Where ``ANALYZE`` has seen the column, a search weighs by its statistics instead
(``pg_stats.most_common_elems``, kept :data:`~om_workers.store.repositories.search_counts.
STATS_TTL_S` in the process): a listed lexeme's share of the rows, and for the rows the
statistics do not list, the estimate PostgreSQL's planner gives an unlisted lexeme (half the
least listed share) in all, spread over the levels not listed; every level is then searched.
So IDFs are estimates, the same for every search between two ``ANALYZE`` runs, and a scope's
page is exactly the ranking they define. A column ``ANALYZE`` has not seen yet (a new or small
store) is counted exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sqlalchemy import Connection, text

from om_core.read.search import SearchQuery
from om_core.read.search_plan import TSQUERY, Combination, held_at
from om_core.read.search_terms import LEVELS, term
from om_workers.store.repositories import search_counts
from om_workers.store.repositories.search_counts import KEPT_COUNTS
from om_workers.store.repositories.search_levelled import (
    MEMORY,
    MESSAGES,
    Counted,
    IndexCounts,
    KeyQuery,
    MessageStatements,
)
from om_workers.store.repositories.search_sql import OF_TENANT, ROW_SHIFT, WITHHELD_ROWS

_TABLES = {MESSAGES: "entries", MEMORY: "memory_items"}
_INDEXED = {MESSAGES: "kind = 'message'", MEMORY: "TRUE"}
# The query's words as PostgreSQL's lexemes, in the words' order.
_STEMS = text("""
    SELECT l.lexeme FROM unnest(CAST(:terms AS text[])) WITH ORDINALITY AS w(word, n)
    CROSS JOIN LATERAL unnest(tsvector_to_array(to_tsvector('english'::regconfig, w.word)))
        WITH ORDINALITY AS l(lexeme, k)
    ORDER BY w.n, l.k
""")
_STATISTICS = text("""
    SELECT s.most_common_elems::text::text[] AS elems, s.most_common_elem_freqs AS shares,
        s.null_frac, c.reltuples
    FROM pg_stats AS s
    JOIN pg_class AS c ON c.relname = s.tablename
        AND c.relnamespace = to_regnamespace(s.schemaname)
    WHERE s.schemaname = current_schema() AND s.tablename = :table
        AND s.attname = 'search_levels'
""")
_EXACT = """
    SELECT u.lexeme, count(*) AS rows
    FROM {table} AS t, unnest(t.search_levels) AS u
    WHERE {indexed} AND t.search_levels @@ CAST(:any AS tsquery) AND u.lexeme = ANY(:terms)
    GROUP BY u.lexeme
"""
_ROWS = "SELECT count(*) FROM {table} WHERE {indexed} AND search_levels IS NOT NULL"
_SESSION_ROWS = text(search_counts.SESSION_ROWS)
_SESSIONS_ROWS = text(
    "SELECT coalesce(sum(entry_count), 0) FROM sessions WHERE pk = ANY(:session_pks)"
)
_ROW = f"e.session_pk * {ROW_SHIFT} + e.seq"
_NOT_HIDDEN = """e.session_pk NOT IN (
    SELECT pk FROM sessions WHERE tenant_id = :tenant_id AND erased_at IS NOT NULL)"""
_AFTER = (
    f"AND (e.session_pk, e.seq) > (CAST(:after_row AS bigint) / {ROW_SHIFT}, "
    f"CAST(:after_row AS bigint) % {ROW_SHIFT})"
)


@dataclass(frozen=True)
class Statistics:
    """What ``ANALYZE`` last saw of one table's ``search_levels``: the rows holding terms, and
    the share of them each listed lexeme is in (none: the column was not analysed)."""

    rows: int
    shares: dict[str, float]

    @cached_property
    def unlisted(self) -> float:
        """The rows estimated for a lexeme the statistics do not list: half the least listed
        lexeme's, as PostgreSQL's planner estimates it (at least one)."""
        return max(1.0, min(self.shares.values()) * self.rows / 2)

    def counted(self, stem: str) -> Counted:
        """``stem``'s estimated rows per level: the listed levels' shares, and the unlisted
        estimate spread over the other levels (every level searched)."""
        listed = {lv: self.shares.get(term(stem, lv)) for lv in range(LEVELS)}
        others = [lv for lv, share in listed.items() if share is None]
        spread = self.unlisted / len(others) if others else 0.0
        levels = {
            lv: round(share * self.rows) if share is not None else max(1, round(spread))
            for lv, share in listed.items()
        }
        return Counted(levels, every_level=True)


def statistics(connection: Connection, table: str) -> Statistics | None:
    """``table``'s statistics of ``search_levels`` (kept a while), or ``None`` when it has
    none to weigh by."""
    engine = connection.engine
    kept = KEPT_COUNTS.statistics(engine, table)
    if kept is not None:
        return kept if kept.shares else None
    row = connection.execute(_STATISTICS, {"table": table}).first()
    found = Statistics(0, {})
    if row is not None and row.elems is not None and row.reltuples > 0:
        rows = int(row.reltuples * (1 - row.null_frac))
        # The shares are followed by their minimum, maximum and (maybe) the null share.
        elements = list(row.elems)
        found = Statistics(rows, dict(zip(elements, row.shares[: len(elements)], strict=True)))
    KEPT_COUNTS.keep_statistics(engine, table, found)
    return found if found.shares and found.rows > 0 else None


def exact_counts(connection: Connection, source: int, stems: Sequence[str]) -> IndexCounts:
    """The exact rows of each of ``stems`` per level in the index of ``source`` (a pass over
    the rows holding them: for a store ``ANALYZE`` has not seen)."""
    table, indexed = _TABLES[source], _INDEXED[source]
    terms = [term(stem, level) for stem in stems for level in range(LEVELS)]
    params = {"any": TSQUERY.any_of(terms), "terms": terms}
    found = connection.execute(text(_EXACT.format(table=table, indexed=indexed)), params)
    levels: dict[str, dict[int, int]] = {stem: {} for stem in stems}
    for lexeme, rows in found:
        stem, _, level = str(lexeme).rpartition("_")
        levels[stem][int(level)] = int(rows)
    total = connection.execute(text(_ROWS.format(table=table, indexed=indexed))).scalar()
    counted = {stem: Counted(levels[stem], every_level=False) for stem in stems}
    return IndexCounts(int(total or 0), counted)


class PostgresIndex:
    """The GIN-indexed levelled terms on one search's connection and scope (a
    :class:`~om_workers.store.repositories.search_levelled.LevelledIndex`)."""

    syntax = TSQUERY
    reads_sets = True
    """A GIN statement of common terms costs milliseconds (its bitmap of their rows), reading a
    thousand rows' levels about as much."""
    first_batch = 4
    """Half SQLite's: a first statement of eight combinations often asked four it did not
    need (the million-entry tenant's p99 72-75 ms, 51-56 ms with four)."""
    small_share = 0.01
    """A combination's statement builds the GIN bitmap of its terms' rows index-wide, however
    small the scope, while reading a scope by its key costs about 3 µs a row. On a million
    messages a search's combinations cost about as much as reading 10,000 rows on average
    (30 ms), and several times more in the slow searches: a search narrowed to 5,000 rows
    took p99 25-30 ms read row by row against 85-134 ms by combination."""

    def __init__(self, connection: Connection, key_query: KeyQuery) -> None:
        self._connection = connection
        self._query = key_query

    @classmethod
    def takes_sessions(cls, connection: Connection, count: int) -> bool:
        """Always: a set of sessions is read by the key's ``session_pk`` as one session is,
        so a narrowed search of 100 sessions costs a few statements, not a few for each."""
        return True

    def stems(self, query: SearchQuery) -> list[str]:
        found = self._connection.execute(_STEMS, {"terms": list(query.terms)}).scalars()
        return list(dict.fromkeys(str(lexeme) for lexeme in found))

    def counts(self, source: int, stems: Sequence[str]) -> IndexCounts:
        seen = statistics(self._connection, _TABLES[source])
        if seen is None:
            return exact_counts(self._connection, source, stems)
        return IndexCounts(seen.rows, {stem: seen.counted(stem) for stem in stems})

    def scope_rows(self) -> int:
        params = self._query.params()
        if self._query.session_pk is not None:
            return int(self._connection.execute(_SESSION_ROWS, params).scalar() or 0)
        if self._query.session_pks is not None:
            return int(self._connection.execute(_SESSIONS_ROWS, params).scalar() or 0)
        return search_counts.tenant_rows(self._connection, self._query.tenant_id)

    def messages(self, *, tenant_term: bool) -> _MessageStatements:
        return _MessageStatements(self._query)

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
        # One pass over the rows holding any of ``within`` (a statement per term would look
        # each up index-wide), each row's levels packed by the statement: one case per word
        # (a row holds a word at one level at most). By scope, the match is written as a
        # function call, which no index answers: the planner then reads the scope's rows by
        # their key, where its GIN cost estimate (far below a bitmap of 100,000 rows' 60 ms)
        # would choose the index.
        by_word: dict[int, list[str]] = {}
        for n, (word, level) in enumerate(asked):
            packed = held_at(word, level)
            by_word.setdefault(word, []).append(
                f"WHEN e.search_levels @@ CAST(:a{n} AS tsquery) THEN {packed}"
            )
        held = " + ".join(f"CASE {' '.join(cases)} ELSE 0 END" for cases in by_word.values())
        params = {
            **self._query.params(),
            "within": TSQUERY.all_of(map(TSQUERY.any_of, within)),
            "held_limit": limit,
            **{f"a{n}": TSQUERY.quote(t) for n, t in enumerate(terms)},
        }
        sql = _MessageStatements(self._query).holding(held, by_scope=by_scope)
        return dict(self._connection.execute(text(sql), params).all())

    def memory_selects(self, count: int) -> str:
        tenant, where = "", _session_scope(self._query, "m")
        if not where:
            tenant = OF_TENANT.format(pk="m.session_pk")
        return " UNION ALL ".join(
            f"(SELECT {n} AS n, m.session_pk * {ROW_SHIFT} + m.ord AS row "
            f"FROM memory_items AS m {tenant} "
            f"WHERE m.search_levels @@ CAST(:m{n} AS tsquery) {where})"
            for n in range(count)
        )

    def rows(self, sql: str, params: dict[str, Any]) -> list[tuple[int, int]]:
        return list(self._connection.execute(text(sql), params).all())


def _session_scope(query: KeyQuery, table: str) -> str:
    """The condition keeping ``table``'s rows to the query's session or sessions ("" for a
    tenant-wide query). The sessions of a set are the tenant's live ones (a narrowing found
    them so), so no tenant condition is needed."""
    if query.session_pk is not None:
        return f"AND {table}.session_pk = :session_pk"
    if query.session_pks is not None:
        return f"AND {table}.session_pk = ANY(:session_pks)"
    return ""


@dataclass(frozen=True)
class _MessageStatements:
    """The statements reading the messages' index in one search's scope: its session or
    sessions, or its tenant's visible sessions (by the key's columns: ``tenant_id`` leads the
    primary key, so a small tenant's rows are read by it), tombstoned entries left out."""

    query: KeyQuery

    def match(self, expression: str) -> str:
        return expression

    def _scope(self) -> str:
        return _session_scope(self.query, "e") or f"AND e.tenant_id = :tenant_id AND {_NOT_HIDDEN}"

    def holding(self, held: str, *, by_scope: bool) -> str:
        """The ``(row, held)`` of each visible row of the scope matching ``:within`` (found
        by the scope's key with ``by_scope``, else by the index)."""
        within = "CAST(:within AS tsquery)"
        match = (
            f"ts_match_vq(e.search_levels, {within})"
            if by_scope
            else f"e.search_levels @@ {within}"
        )
        return (
            f"WITH withheld(row) AS MATERIALIZED ({WITHHELD_ROWS}) "
            f"SELECT {_ROW} AS row, {held} AS held FROM entries AS e "
            f"WHERE e.kind = 'message' AND {match} "
            f"{self._scope()} AND {_ROW} NOT IN (SELECT row FROM withheld) "
            "LIMIT :held_limit"
        )

    def combinations(
        self, batch: Sequence[Combination], excluded: Sequence[str], resumed: Sequence[bool]
    ) -> tuple[str, dict[str, str]]:
        # The index finds the rows holding the combination's terms; the terms its rows must
        # lack are checked on them (as a function call, which no index answers): in the GIN
        # match, each would have its rows looked up too.
        params: dict[str, str] = {}
        for n, c in enumerate(batch):
            params[f"m{n}"] = TSQUERY.both.join(map(TSQUERY.quote, c.held))
            params[f"x{n}"] = TSQUERY.any_of((*c.lacking, *excluded))
        lacking = [bool(c.lacking or excluded) for c in batch]
        return self.selects(len(batch), ordered=True, resumed=resumed, lacking=lacking), params

    def selects(
        self,
        count: int,
        *,
        ordered: bool = False,
        resumed: Sequence[bool] = (),
        probe: bool = False,
        lacking: Sequence[bool] = (),
    ) -> str:
        """``count`` selects of ``(n, row)``, the ``n``th matching ``:m{n}``, joined; each
        ``ordered`` one in row order up to ``:limit`` rows, after ``:after_row`` where
        ``resumed``, lacking every term of ``:x{n}`` where ``lacking``; a ``probe`` finds
        one row at most, withheld or not."""
        scope = self._scope()
        parts = []
        for n in range(count):
            resume = _AFTER if n < len(resumed) and resumed[n] else ""
            if n < len(lacking) and lacking[n]:
                resume += f" AND NOT ts_match_vq(e.search_levels, CAST(:x{n} AS tsquery))"
            order = "ORDER BY e.session_pk, e.seq LIMIT :limit" if ordered else ""
            visible = "" if probe else f"AND {_ROW} NOT IN (SELECT row FROM withheld)"
            parts.append(
                f"(SELECT {n} AS n, {_ROW} AS row FROM entries AS e "
                f"WHERE e.kind = 'message' AND e.search_levels @@ CAST(:m{n} AS tsquery) "
                f"{scope} {resume} {visible} {'LIMIT 1' if probe else order})"
            )
        joined = " UNION ALL ".join(parts)
        return joined if probe else f"WITH withheld(row) AS MATERIALIZED ({WITHHELD_ROWS}) {joined}"
