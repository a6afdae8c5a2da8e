"""PostgreSQL's search pages: ``ts_rank`` over each row's stored lexemes (``search_terms``,
migration ``0016``), the rows most likely to make the page ranked first.

``ts_rank`` has no top-k pruning: a page ranks every row its query matches, and any of the
query's words matches, so a query holding a common word ranked most of a large session. But
``ts_rank`` of an OR query (without normalization) is a sum over the query's ``n`` distinct
lexemes of at most :data:`WORD_RANK` each, divided by ``n``: a row lacking some of the
words ranks below a bound those words set (:func:`lacking_bound`). So a page is first taken
from the rows that hold every word, then from the rows that hold a word other than the
commonest, each ranked as the whole query ranks them; once such a page is full and its last
row ranks above what every row left out could reach, it is the whole query's page. Otherwise
every match is ranked. Which word is commonest comes from PostgreSQL's own statistics of the
column (``pg_stats.most_common_elems``, table-wide, as ``ANALYZE`` last saw it): a wrong
guess costs a statement, never a wrong page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from om_workers.store.repositories.search_sql import (
    AFTER,
    OF_TENANT,
    ROW_SHIFT,
    ROWS,
    WITHHELD_ROWS,
)

WORD_RANK: Final = 0.1
"""The most one lexeme adds to ``ts_rank`` before the sum is divided by the query's lexeme
count: its weight, 0.1 for class D, which ``to_tsvector`` gives every lexeme (a single
occurrence adds 0.061, repeats approach 0.1)."""
RANK_SLACK: Final = 1e-5
"""``ts_rank`` is a float4: a margin far above its rounding and far below one word's share."""
COMMON_SHARE: Final = 0.05
"""When the query's commonest word is in this share of the rows or more (as ``ANALYZE`` last
saw the table), the rows holding one of its other words are ranked before the rest."""

Match = Literal["every", "rare", "whole"]

# ``whole``: any of the words, which ranks every row; ``every`` and ``rare`` choose rows only.
_QUERY = """(SELECT
    replace(plainto_tsquery('english'::regconfig, :words)::text, ' & ', ' | ')::tsquery AS whole,
    plainto_tsquery('english'::regconfig, :words) AS every,
    replace(plainto_tsquery('english'::regconfig, :rare_words)::text, ' & ', ' | ')::tsquery
        AS rare) AS q"""
_NOT_HIDDEN = """e.session_pk NOT IN (
    SELECT pk FROM sessions WHERE tenant_id = :tenant_id AND erased_at IS NOT NULL)"""
_ENTRIES = f"""
    SELECT 0 AS source, e.session_pk * {ROW_SHIFT} + e.seq AS row,
        -ts_rank(e.search_terms, q.whole)::float8 AS rank
    FROM entries AS e, {_QUERY}
    WHERE e.kind = 'message' AND e.tenant_id = :tenant_id {{session_filter}}
        AND e.search_terms @@ q.{{match}}
        AND e.session_pk * {ROW_SHIFT} + e.seq NOT IN ({WITHHELD_ROWS})
        AND {_NOT_HIDDEN}
"""
_MEMORY = f"""
    SELECT 1 AS source, m.session_pk * {ROW_SHIFT} + m.ord AS row,
        -ts_rank(m.search_terms, q.whole)::float8 AS rank
    FROM memory_items AS m {{tenant_join}}, {_QUERY}
    WHERE m.search_terms @@ q.{{match}} {{session_filter}}
"""
# Only the page's keys are sorted with the matches, and the stored rows (payloads) are read
# for the page alone.
_PAGE = f"""
    WITH candidates AS (
        SELECT source, row, rank FROM ({{entries}} UNION ALL {{memory}}) AS c
        WHERE TRUE {{after}}
        ORDER BY rank, source, row
        LIMIT :limit)
    {ROWS}
"""
RANK_ALL_ROWS: Final = 5_000
"""Matches a page ranks at once rather than in steps (as the statistics estimate them): each
step is a statement, and ranking this many rows costs about as much (some 2 ms)."""
# Each word's lexeme count and the share of rows its commonest lexeme is in (0 when the
# statistics do not list it), with the query's distinct lexemes, as ts_rank counts them, and
# the scope's entries.
_WORD_SHARES = """
    SELECT w.word, count(DISTINCT l.lexeme) AS lexemes, max(coalesce(f.share, 0)) AS share,
        (SELECT length(to_tsvector('english'::regconfig, :words))) AS query_lexemes,
        (SELECT coalesce(sum(entry_count), 0) FROM sessions
            WHERE tenant_id = :tenant_id {scope_filter}) AS scope_rows
    FROM unnest(CAST(:terms AS text[])) AS w(word)
    CROSS JOIN LATERAL unnest(tsvector_to_array(to_tsvector('english'::regconfig, w.word)))
        AS l(lexeme)
    LEFT JOIN (
        SELECT unnest(most_common_elems::text::text[]) AS elem,
            unnest(most_common_elem_freqs) AS share
        FROM pg_stats
        WHERE schemaname = current_schema() AND tablename = 'entries'
            AND attname = 'search_terms') AS f ON f.elem = l.lexeme
    GROUP BY w.word
"""


def word_shares_statement(*, session: bool) -> str:
    """The statement :func:`word_shares` reads (of one session with ``session``)."""
    return _WORD_SHARES.format(scope_filter="AND pk = :session_pk" if session else "")


@dataclass(frozen=True)
class WordShare:
    """One query word as the statistics see it: its lexemes (a hyphenated word has several)
    and the share of rows its commonest lexeme is in."""

    word: str
    lexemes: int
    share: float


@dataclass(frozen=True)
class Step:
    """One statement of a page: the rows it ranks (``match``), the most any row it leaves
    out can rank (``bound``), and the words that make ``rare``."""

    match: Match
    bound: float = 0.0
    rare_words: tuple[str, ...] = ()

    def rare_text(self, words: str) -> str:
        """What the statement binds as ``:rare_words`` (the query's ``words`` when this step
        does not match by them: the expression must still parse)."""
        return " ".join(self.rare_words) or words

    def settles(self, ranks: Sequence[float], limit: int) -> bool:
        """Whether a page of these ``ranks`` (scores, best first) is the whole query's."""
        if self.match == "whole":
            return True
        return len(ranks) == limit and ranks[-1] > self.bound + RANK_SLACK


def lacking_bound(held_lexemes: int, query_lexemes: int) -> float:
    """The highest ``ts_rank`` a row can get from ``held_lexemes`` of a query's
    ``query_lexemes`` (a row lacking the others)."""
    if query_lexemes <= 0:
        return 0.0
    return WORD_RANK * min(held_lexemes, query_lexemes) / query_lexemes


def steps(words: Sequence[WordShare], query_lexemes: int, scope_rows: int) -> list[Step]:
    """The statements a page tries, in order; the last ranks every match. The rows holding
    every word come first; then, when the commonest word is common, the rows holding any
    other word (a row holding only the commonest ranks at most its own lexemes' weight).
    A scope of ``scope_rows`` entries whose matches are few is ranked at once."""
    planned: list[Step] = []
    commonest = max(words, key=lambda word: word.share, default=None)
    if commonest is None or commonest.share * scope_rows < RANK_ALL_ROWS:
        return [Step("whole")]
    if query_lexemes > 1:
        planned.append(Step("every", lacking_bound(query_lexemes - 1, query_lexemes)))
    if commonest.share >= COMMON_SHARE and len(words) > 1:
        rare = tuple(word.word for word in words if word is not commonest)
        planned.append(Step("rare", lacking_bound(commonest.lexemes, query_lexemes), rare))
    planned.append(Step("whole"))
    return planned


def page_statement(*, match: Match, session: bool, after: bool) -> str:
    """The page statement ranking the rows ``match`` names (of one session with
    ``session``; after the cursor's key with ``after``)."""
    entries = _ENTRIES.format(
        session_filter="AND e.session_pk = :session_pk" if session else "", match=match
    )
    memory = _MEMORY.format(
        session_filter="AND m.session_pk = :session_pk" if session else "",
        tenant_join="" if session else OF_TENANT.format(pk="m.session_pk"),
        match=match,
    )
    return _PAGE.format(entries=entries, memory=memory, after=AFTER if after else "")


def word_shares(rows: Sequence[Mapping[Any, Any]]) -> tuple[list[WordShare], int, int]:
    """The words, the query's lexeme count and the scope's entries, from the rows of
    :func:`word_shares_statement`."""
    words = [WordShare(r["word"], int(r["lexemes"]), float(r["share"])) for r in rows]
    if not rows:
        return words, 0, 0
    return words, int(rows[0]["query_lexemes"]), int(rows[0]["scope_rows"])
