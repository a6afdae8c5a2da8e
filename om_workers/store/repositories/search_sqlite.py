"""SQLite's ranked candidates: the keys of the best rows, from FTS5, scored class by class.

Words in half the indexed messages or more are left out when a rarer word is known to match
(FTS5's BM25 floors their IDF to 1e-6: they add nothing to a score, while matching them would
score most rows). The messages are then scored by the classes of
:mod:`~om_workers.store.repositories.search_bounds` (the rows holding exactly a set of the
words, or unions of such sets where one expression can still name each word once), best
bound first, until the next class cannot reach the page, or until scoring the
whole query at once is expected to cost less than going on (:data:`ROW_COST`). Memory items
are few and scored whole. Only keys come back from here; the rows are read for the page
alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, bindparam, text

from om_core.read.search import SearchKey, SearchQuery
from om_workers.store.repositories.search_bounds import ClassPlan, beyond_reach, class_plan
from om_workers.store.repositories.search_sql import AFTER, OF_TENANT, ROW_SHIFT, WITHHELD_ROWS

SAMPLED_SESSIONS = 2_000
"""Sessions of a tenant whose rows are looked up to estimate the tenant's (one lookup each)."""
CLASS_BUDGET = 0.5
"""The share of the whole query's expected cost that classes scored one by one may spend
after the first (which holds the rows able to score best, and often ends the search); past
it the whole query is scored at once, if that costs less than scoring every class left.
Queries of many words, whose classes are many and each a statement naming every word, spent
up to twice the whole query's cost without it; queries of two common words, whose classes
are three, spent twice as much with it and no check on what was left."""
ROW_COST = 27.0
"""What FTS5 spends scoring a matched row (about 0.7 µs), in units of what it spends counting
one row of a word for its IDF (about 26 ns): every statement counts each of its words' rows
in the whole index anew, so a statement costs the words' document counts before any row."""

_INDEXED_MESSAGES = text("SELECT block FROM entries_fts_data WHERE id = 1")
_DOCUMENTS = text("SELECT term, doc FROM entries_fts_vocab WHERE term IN :terms").bindparams(
    bindparam("terms", expanding=True)
)
# A session's largest indexed seq, and those of a tenant's sessions (the oldest
# :data:`SAMPLED_SESSIONS`, scaled to all of them): about the number of rows a match may name,
# for the choice of a plan only (seqs of other entries count too).
_SESSION_ROWS = text(
    "SELECT coalesce(max(id) - :row_lo + 1, 0) FROM entries_fts_docsize "
    "WHERE id BETWEEN :row_lo AND :row_hi"
)
_TENANT_ROWS = text(f"""
    WITH own AS (SELECT pk FROM sessions WHERE tenant_id = :tenant_id AND erased_at IS NULL),
    sample AS (SELECT pk FROM own ORDER BY pk LIMIT :sampled)
    SELECT (SELECT count(*) FROM own) AS sessions, (SELECT count(*) FROM sample) AS sampled,
        (SELECT coalesce(sum((
            SELECT max(d.id) - s.pk * {ROW_SHIFT} + 1 FROM entries_fts_docsize AS d
            WHERE d.id BETWEEN s.pk * {ROW_SHIFT} AND s.pk * {ROW_SHIFT} + {ROW_SHIFT - 1})), 0)
        FROM sample AS s) AS rows
""")
# Ranks are FTS5's own: a class's statement and the whole query's give a row the same score to
# the bit (see search_bounds), so a cursor from a page of one continues a page of the other.
_ENTRY_KEYS = f"""
    SELECT source, row, rank FROM (
        SELECT 0 AS source, f.rowid AS row, f.rank AS rank
        FROM entries_fts AS f {{tenant_join}}
        WHERE entries_fts MATCH :match {{session_range}}
            AND f.rowid NOT IN ({WITHHELD_ROWS}))
    WHERE TRUE {{after}}
    ORDER BY rank, row
    LIMIT :limit
"""
_MEMORY_KEYS = f"""
    SELECT source, row, rank FROM (
        SELECT 1 AS source, m.session_pk * {ROW_SHIFT} + m.ord AS row, f.rank AS rank
        FROM memory_fts AS f JOIN memory_items AS m ON m.rowid = f.rowid {{tenant_join}}
        WHERE memory_fts MATCH :memory_match {{session_filter}})
    WHERE TRUE {{after}}
    ORDER BY rank, row
    LIMIT :limit
"""


def _varint(block: bytes) -> int:
    """SQLite's varint at the start of ``block`` (big-endian 7-bit groups; a 9th byte is whole)."""
    value = 0
    for byte in block[:8]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value
    return (value << 8) | block[8]


@dataclass(frozen=True)
class Vocabulary:
    """What the index says of a query's words: how many messages are indexed, and how many
    hold each word found in the vocabulary as written."""

    messages: int
    documents: dict[str, int]


def vocabulary(connection: Connection, query: SearchQuery) -> Vocabulary:
    """The index's message count and the query's words' document counts (a word's count
    costs a pass over its rows in the whole index)."""
    block = connection.execute(_INDEXED_MESSAGES).scalar()
    if not block:
        return Vocabulary(0, {})
    rows = connection.execute(_DOCUMENTS, {"terms": list(query.terms)})
    return Vocabulary(_varint(bytes(block)), {str(row.term): int(row.doc) for row in rows})


def informative(query: SearchQuery, counts: Vocabulary) -> SearchQuery:
    """``query`` without the words in half the indexed messages or more, when another word is
    known to match. The vocabulary holds stems, so a word not found there (stemmed
    differently, or absent) is kept but is no proof of a match; then the query stays whole."""
    documents, half = counts.documents, counts.messages / 2
    if not counts.messages:
        return query
    kept = tuple(term for term in query.terms if documents.get(term, 0) < half)
    if any(documents.get(term, 0) > 0 for term in kept):
        return SearchQuery(kept)
    return query


@dataclass(frozen=True)
class KeyQuery:
    """One search's scope and page: the tenant, the session (``None``: every session of the
    tenant), the cursor's key, the number of keys wanted, and whether a tenant-wide match
    ANDs in the tenant's token."""

    tenant_id: str
    session_pk: int | None
    after: SearchKey | None
    limit: int
    tenant_token: bool = True

    def params(self) -> dict[str, Any]:
        """The bind parameters every key statement of this search takes."""
        params: dict[str, Any] = {"tenant_id": self.tenant_id, "limit": self.limit}
        if self.session_pk is not None:
            params["row_lo"] = self.session_pk * ROW_SHIFT
            params["row_hi"] = (self.session_pk + 1) * ROW_SHIFT - 1
            params["session_pk"] = self.session_pk
        if self.after is not None:
            after = self.after
            params.update(after_rank=after.rank, after_source=after.source, after_row=after.row)
        return params

    def match(self, expression: str) -> str:
        """The FTS5 match of ``expression`` over message text; for a tenant-wide search, with
        :attr:`tenant_token`, within the tenant's rows (its token, ANDed in, weighs nothing in
        the rank; the statement's join on the tenant's sessions filters either way)."""
        if self.session_pk is not None or not self.tenant_token:
            return f"body : ({expression})"
        return f'tenant : "{self.tenant_id.encode().hex()}" AND body : ({expression})'


def _statement(template: str, key_query: KeyQuery, session_pk: str) -> str:
    session = key_query.session_pk is not None
    return template.format(
        tenant_join="" if session else OF_TENANT.format(pk=session_pk),
        session_range="AND f.rowid BETWEEN :row_lo AND :row_hi" if session else "",
        session_filter="AND m.session_pk = :session_pk" if session else "",
        after=AFTER if key_query.after is not None else "",
    )


def _keys(connection: Connection, sql: str, params: dict[str, Any]) -> list[SearchKey]:
    rows = connection.execute(text(sql), params)
    return [SearchKey(float(row.rank), int(row.source), int(row.row)) for row in rows]


def _best(keys: Sequence[SearchKey], limit: int) -> list[SearchKey]:
    return sorted(set(keys))[:limit]


def _scope_rows(connection: Connection, key_query: KeyQuery) -> int:
    if key_query.session_pk is not None:
        return int(connection.execute(_SESSION_ROWS, key_query.params()).scalar() or 0)
    params = {"tenant_id": key_query.tenant_id, "sampled": SAMPLED_SESSIONS}
    found = connection.execute(_TENANT_ROWS, params).one()
    return int(found.rows) * int(found.sessions) // max(int(found.sampled), 1)


@dataclass(frozen=True)
class _Costs:
    """What a statement costs before its rows, and what scoring every row of the scope
    would, in :data:`ROW_COST`'s units."""

    statement: float
    scoring: float


class SqliteKeys:
    """The best keys of one search on a SQLite connection (see the module)."""

    def __init__(self, connection: Connection, key_query: KeyQuery) -> None:
        self._connection = connection
        self._query = key_query
        self._entries = _statement(_ENTRY_KEYS, key_query, f"f.rowid / {ROW_SHIFT}")

    def best(self, query: SearchQuery) -> list[SearchKey]:
        """Up to ``limit`` keys after the cursor's, best first: the scope's messages and
        memory items matching any word of ``query``, tombstoned entries left out."""
        memory = _statement(_MEMORY_KEYS, self._query, "m.session_pk")
        params = {**self._query.params(), "memory_match": query.fts5()}
        keys = _keys(self._connection, memory, params)
        counts = vocabulary(self._connection, query)
        words = informative(query, counts)
        plan = class_plan(words, counts.documents, counts.messages)
        scope = _scope_rows(self._connection, self._query)
        # A tenant holding most of the index is filtered by the join alone: its token's rows
        # would be counted anew by every statement (FTS5's IDF of each phrase) for no gain.
        token = self._query.session_pk is None and scope < counts.messages / 2
        self._query = replace(self._query, tenant_token=token)
        if len(words.terms) == 1 or not counts.messages:
            return _best([*keys, *self._match(plan.order.fts5())], self._query.limit)
        fixed = sum(counts.documents.get(w, counts.messages) for w in words.terms)
        costs = _Costs(fixed + (scope if token else 0), ROW_COST * scope)
        if costs.scoring * plan.share < costs.statement:
            return _best([*keys, *self._match(plan.order.fts5())], self._query.limit)
        return self._by_class(keys, plan, costs)

    def _match(self, expression: str) -> list[SearchKey]:
        params = {**self._query.params(), "match": self._query.match(expression)}
        return _keys(self._connection, self._entries, params)

    def _by_class(self, keys: list[SearchKey], plan: ClassPlan, costs: _Costs) -> list[SearchKey]:
        limit, spent = self._query.limit, 0.0
        whole = costs.statement + costs.scoring * plan.share
        class_costs = [costs.statement + costs.scoring * c.share for c in plan.classes]
        # What scoring every class left would cost: the whole query is worth scoring at once
        # only when it costs less than that (it scores again the rows already scored).
        left = sum(class_costs)
        for word_class, cost in zip(plan.classes, class_costs, strict=True):
            if len(keys) >= limit and beyond_reach(word_class, keys[limit - 1].rank):
                return keys
            if spent and spent + cost > whole * CLASS_BUDGET and whole < left:
                return _best([*keys, *self._match(plan.order.fts5())], limit)
            keys = _best([*keys, *self._match(word_class.fts5())], limit)
            spent += cost
            left -= cost
        return keys
