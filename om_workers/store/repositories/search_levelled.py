"""The best keys of a search over an index of levelled terms, on either store.

Each indexed row holds one term per stem of its text, naming the stem's weight level
(:mod:`om_core.read.search_terms`); SQLite keeps them in FTS5 tables
(:mod:`~om_workers.store.repositories.search_sqlite`), PostgreSQL in a ``tsvector`` column
with a GIN index (:mod:`~om_workers.store.repositories.search_postgresql`). A search learns
how many rows hold each of the query's stems at each level, keeps the stems of highest IDF
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

Memory items are few: they are all scored from their terms. Only keys come back from here;
the rows are read for the page alone.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from om_core.read.search import SearchKey, SearchQuery
from om_core.read.search_plan import (
    MAX_SCORED_STEMS,
    RARE_SHARE,
    Combination,
    EmptySets,
    PlanWord,
    Syntax,
    best_keys,
    combinations,
    places,
    read_places,
    rows_held,
    terms_at,
)
from om_core.read.search_terms import LEVELS, idf
from om_workers.store.repositories.search_sql import ROW_SHIFT

READ_ROWS = 3_000
"""Rows of the index a search reads and scores one by one: those of its rarest terms (a rare
stem, a common one's rare levels), as many as fit; the rest are taken by combination."""
SMALL_SCOPE = 4_000
"""A scope (a session, or a tenant) of at most this many messages is scored row by row (and
a larger one, within an index's :attr:`LevelledIndex.small_share` of its rows)."""
FIRST_BATCH = 8
"""Combinations asked in the first statement at most (an index may ask fewer:
:attr:`LevelledIndex.first_batch`); each next statement asks twice as many, up to
:data:`MAX_BATCH` (most searches end within the first)."""
MAX_BATCH = 64
SET_ROWS = 1_000
"""Rows of a set of rare words an index that reads sets (:attr:`LevelledIndex.reads_sets`)
reads with their levels; a set held by more is probed, and its combinations asked."""
MESSAGES = 0
"""The key source of a message (see :mod:`~om_workers.store.repositories.search_sql`)."""
MEMORY = 1
"""The key source of a memory item."""


@dataclass(frozen=True)
class KeyQuery:
    """One search's scope and page: the tenant, the session (``None``: every session of the
    tenant, or the sessions of ``session_pks`` where the index takes the set: ``takes_sessions``
    of :class:`~om_workers.store.repositories.search_sqlite.SqliteIndex` and of
    :class:`~om_workers.store.repositories.search_postgresql.PostgresIndex`), the cursor's key,
    and the number of keys wanted."""

    tenant_id: str
    session_pk: int | None
    after: SearchKey | None
    limit: int
    session_pks: tuple[int, ...] | None = None

    def params(self) -> dict[str, Any]:
        """The bind parameters every statement of this search takes."""
        params: dict[str, Any] = {"tenant_id": self.tenant_id, "limit": self.limit}
        if self.session_pk is not None:
            params["row_lo"] = self.session_pk * ROW_SHIFT
            params["row_hi"] = (self.session_pk + 1) * ROW_SHIFT - 1
            params["session_pk"] = self.session_pk
        if self.session_pks is not None:
            params["session_pks"] = list(self.session_pks)
        if self.after is not None:
            params["after_row"] = self.after.row
        return params


@dataclass(frozen=True)
class Counted:
    """A stem's rows per level in one index, and whether every level is to be searched (the
    counts were kept from an earlier search, or are estimates: a level may hold rows they
    do not show)."""

    levels: dict[int, int]
    every_level: bool

    @property
    def documents(self) -> int:
        """The rows holding the stem at any level."""
        return sum(self.levels.values())


@dataclass(frozen=True)
class IndexCounts:
    """What an index knows of a query's stems: the rows it indexes, and each stem's rows per
    level (a stem no row holds is left out or counted empty)."""

    rows: int
    stems: dict[str, Counted]


@dataclass
class QueryFacts:
    """What the searches of one query in several scopes share, learnt by the first of them
    (neither depends on the scope): the query's stems as the index stems them, and the words
    each source's plan scores (from the index's counts of those stems)."""

    stems: list[str] | None = None
    words: dict[int, _Words] = field(default_factory=dict)


class MessageStatements(Protocol):
    """The statements reading the messages' index in one search's scope."""

    def match(self, expression: str) -> str:
        """The match of ``expression``'s rows in the scope (the scope's own term added where
        the index narrows by it)."""

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

    def combinations(
        self, batch: Sequence[Combination], excluded: Sequence[str], resumed: Sequence[bool]
    ) -> tuple[str, dict[str, str]]:
        """The statement of ``batch``'s rows (``(n, row)``: ``batch[n]``'s first ``:limit``
        rows in row order, after ``:after_row`` where ``resumed``, none holding any of
        ``excluded``), and its match parameters."""


class LevelledIndex(Protocol):
    """One store's index of levelled terms, on one search's connection and scope."""

    syntax: Syntax
    reads_sets: bool
    """Whether the rows of a set of rare words are read, with their levels, where few hold it
    (their combinations are then answered without a statement each), rather than probed: an
    index whose statements cost more than reading a thousand rows."""
    first_batch: int
    """Combinations this index asks in a search's first statement (at most
    :data:`FIRST_BATCH`): fewer where each costs more."""
    small_share: float
    """A scope of at most this share of the index's rows is also scored row by row, beyond
    :data:`SMALL_SCOPE`: for an index whose combinations cost by the index's rows of their
    terms, not the scope's (0: combinations cost by the scope's rows)."""

    def stems(self, query: SearchQuery) -> list[str]:
        """The distinct stems of the query's words, in order, as this index stems them."""

    def counts(self, source: int, stems: Sequence[str]) -> IndexCounts:
        """The counts of ``stems`` in the index of ``source`` (:data:`MESSAGES` or
        :data:`MEMORY`)."""

    def scope_rows(self) -> int:
        """About the messages the search's scope holds, for the choice of a plan only."""

    def messages(self, *, tenant_term: bool) -> MessageStatements:
        """The message statements of the search (narrowed by the tenant's term inside the
        index with ``tenant_term``)."""

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
        """The visible rows of the scope holding one term of each group of ``within``, each
        with its levels packed (:func:`~om_core.read.search_plan.held_at`) from the places of
        ``asked`` (``(word, level)``, whose terms are ``terms``) it holds; ``by_scope``: the
        scope holds fewer rows than the index holds of ``within`` (its own may be cheaper
        read); ``limit``: at most that many rows, where the index can stop early."""

    def memory_selects(self, count: int) -> str:
        """``count`` selects of ``(n, row)`` of the scope's memory items matching ``:m{n}``,
        joined."""

    def rows(self, sql: str, params: dict[str, Any]) -> list[tuple[int, int]]:
        """The ``(n, row)`` pairs of ``sql``."""


@dataclass(frozen=True)
class _Words:
    """The stems a search scores in one index, with their rows, and the index's size."""

    words: tuple[PlanWord, ...]
    counted: tuple[Counted, ...]
    rows: int


class LevelledKeys:
    """The best keys of one search (see the module)."""

    def __init__(
        self,
        index: LevelledIndex,
        key_query: KeyQuery,
        facts: QueryFacts | None = None,
    ) -> None:
        self._index = index
        self._query = key_query
        self._syntax = index.syntax
        self._facts = facts if facts is not None else QueryFacts()

    def best(self, query: SearchQuery) -> list[SearchKey]:
        """Up to ``limit`` keys after the cursor's, best first: the scope's messages and
        memory items holding any scored stem of ``query``, tombstoned entries left out."""
        facts = self._facts
        if facts.stems is None:
            facts.stems = self._index.stems(query)
        found = facts.stems
        if not found:
            return []
        return self._page_of([*self._memory(found), *self._messages(found)])

    # -- what the index knows of the query's stems

    def _words(self, source: int, found: Sequence[str]) -> _Words:
        known = self._facts.words.get(source)
        if known is None:
            known = self._facts.words[source] = self._count_words(source, found)
        return known

    def _count_words(self, source: int, found: Sequence[str]) -> _Words:
        counts = self._index.counts(source, found)
        counted = counts.stems
        held = [stem for stem in found if stem in counted and counted[stem].documents]
        # The rarest stems (highest IDF), kept in the query's order.
        rarest = set(sorted(held, key=lambda stem: counted[stem].documents)[:MAX_SCORED_STEMS])
        chosen = [(stem, counted[stem]) for stem in held if stem in rarest]
        words = tuple(
            PlanWord(
                stem,
                idf(counts.rows, c.documents),
                tuple(range(LEVELS)) if c.every_level else tuple(sorted(c.levels)),
            )
            for stem, c in chosen
        )
        return _Words(words, tuple(c for _, c in chosen), counts.rows)

    # -- messages

    def _messages(self, found: Sequence[str]) -> list[SearchKey]:
        plan = self._words(MESSAGES, found)
        if not plan.words:
            return []
        scope = self._index.scope_rows()
        messages = self._index.messages(tenant_term=scope < plan.rows / 2)
        counts = [c.levels for c in plan.counted]
        small = scope <= max(SMALL_SCOPE, self._index.small_share * plan.rows)
        read_at = read_places(plan.words, counts, math.inf if small else READ_ROWS)
        read = set(read_at)
        dense = self._in_scope(
            messages,
            [
                replace(word, levels=tuple(lv for lv in word.levels if (i, lv) not in read))
                for i, word in enumerate(plan.words)
            ],
        )
        read_terms = terms_at(plan.words, read_at)
        levels: dict[int, int] = {}
        if read_terms:
            asked = [*read_at, *places(dense)]
            terms = terms_at(plan.words, asked)
            # Fewer rows in the scope than the index holds of these terms: read the scope's.
            by_scope = scope < sum(counts[i].get(level, 0) for i, level in read_at)
            levels = self._index.held(messages, [read_terms], asked, terms, by_scope=by_scope)
        keys = best_keys(plan.words, levels, MESSAGES, self._query.limit, self._query.after)
        combined = [word for word in dense if word.levels]
        if not combined:
            return keys
        documents = {w.stem: c.documents for w, c in zip(plan.words, plan.counted, strict=True)}
        rare = [i for i, w in enumerate(combined) if documents[w.stem] <= RARE_SHARE * plan.rows]
        cores = EmptySets(combined, frozenset(rare))
        return self._by_combination(messages, cores, read_terms, keys, levels.keys())

    def _in_scope(self, statements: MessageStatements, words: Sequence[PlanWord]) -> list[PlanWord]:
        """``words`` at only the levels some row of the scope holds them at (a probe each, in
        one statement): a level the scope lacks would only multiply the combinations."""
        asked = places(words)
        if not asked:
            return list(words)
        quote = self._syntax.quote
        probes = [statements.match(quote(t)) for t in terms_at(words, asked)]
        found = self._run(statements.selects(len(probes), probe=True), probes)
        held = {asked[n] for n, _ in found}
        return [
            replace(word, levels=tuple(lv for lv in word.levels if (i, lv) in held))
            for i, word in enumerate(words)
        ]

    def _by_combination(
        self,
        statements: MessageStatements,
        cores: EmptySets,
        excluded: Sequence[str],
        keys: list[SearchKey],
        read: Container[int],
    ) -> list[SearchKey]:
        """``keys`` with the rows holding only the combined words (``cores.words``; none of
        ``excluded``, whose rows are ``read``), taken by combination, best first, until no
        later one can reach the page."""
        after, limit = self._query.after, self._query.limit
        visible = keys
        batch: list[Combination] = []
        size = min(FIRST_BATCH, self._index.first_batch)
        for group in combinations(cores.words):
            rank = -group[0].score
            if after is not None and (
                rank < after.rank or (rank == after.rank and after.source > MESSAGES)
            ):
                continue  # every row of the group comes before the cursor
            if not batch and len(visible) >= limit and visible[limit - 1].rank < rank:
                break
            batch.extend(c for c in group if not cores.empty(c))
            if len(batch) >= size:
                found = self._combined(statements, cores, batch, excluded, read)
                visible = self._page_of([*visible, *found])
                batch, size = [], min(2 * size, MAX_BATCH)
        if batch:
            found = self._combined(statements, cores, batch, excluded, read)
            visible = self._page_of([*visible, *found])
        return visible

    def _combined(
        self,
        statements: MessageStatements,
        cores: EmptySets,
        batch: Sequence[Combination],
        excluded: Sequence[str],
        read: Container[int],
    ) -> list[SearchKey]:
        """The keys of ``batch``'s rows, after its combinations holding a set of rare words
        no row of the scope holds together are left out (such sets probed or read first);
        those holding a set whose rows were read are answered from them."""
        new = cores.unprobed(batch)
        if new:
            self._learn(statements, cores, new)
            batch = [c for c in batch if not cores.empty(c)]
        keys: list[SearchKey] = []
        asked: list[Combination] = []
        for c in batch:
            rows = cores.rows_of(c)
            if rows is None:
                asked.append(c)
            else:
                keys += (SearchKey(-c.score, MESSAGES, row) for row in rows if row not in read)
        if not asked:
            return keys
        after = self._query.after
        # Rows of the cursor's own rank continue after its row.
        resumed = [after is not None and -c.score == after.rank for c in asked]
        sql, matches = statements.combinations(asked, excluded, resumed)
        found = self._index.rows(sql, {**self._query.params(), **matches})
        return [*keys, *(SearchKey(-asked[n].score, MESSAGES, row) for n, row in found)]

    def _learn(
        self, statements: MessageStatements, cores: EmptySets, new: Sequence[frozenset[int]]
    ) -> None:
        """Probe the sets of rare words of ``new``, or read their rows (see
        :attr:`LevelledIndex.reads_sets`)."""
        if not self._index.reads_sets:
            probes = [statements.match(cores.match(self._syntax, core)) for core in new]
            found = {n for n, _ in self._run(statements.selects(len(new), probe=True), probes)}
            cores.learn(new, found)
            return
        asked = places(cores.words)
        terms = terms_at(cores.words, asked)
        for core in new:
            within = cores.terms(core)
            rows = self._index.held(statements, within, asked, terms, limit=SET_ROWS + 1)
            cores.learn_rows(core, rows if len(rows) <= SET_ROWS else None)

    # -- memory

    def _memory(self, found: Sequence[str]) -> list[SearchKey]:
        plan = self._words(MEMORY, found)
        if not plan.words:
            return []
        asked = places(plan.words)
        matches = [self._syntax.quote(t) for t in terms_at(plan.words, asked)]
        held = rows_held(self._run(self._index.memory_selects(len(asked)), matches), asked)
        return best_keys(plan.words, held, MEMORY, self._query.limit, self._query.after)

    def _page_of(self, keys: Iterable[SearchKey]) -> list[SearchKey]:
        """The best ``limit`` of ``keys`` after the cursor's, best first."""
        after = self._query.after
        return heapq.nsmallest(self._query.limit, (k for k in keys if after is None or k > after))

    def _run(self, sql: str, matches: Sequence[str]) -> list[tuple[int, int]]:
        params = {**self._query.params(), **{f"m{n}": m for n, m in enumerate(matches)}}
        return self._index.rows(sql, params)
