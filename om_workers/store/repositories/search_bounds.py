"""Which words of a SQLite search must be scored, and which can be bounded instead.

FTS5 scores every row that matches a query (it has no top-k pruning), so a query holding a
common word scores most of a large session. Its BM25 is a sum over the query's words, and a
word's share of a row's score is below ``idf * (k1 + 1)`` whatever the row (FTS5's ``k1`` is
1.2). So when the rows holding one of the rarer words already fill a page with scores above
the sum of the common words' bounds, no row holding only common words can reach that page:
the page is exact having scored the rarer words' rows alone (the MaxScore argument). The
statement (:mod:`om_workers.store.repositories.search`) checks that on the page it gets and
falls back to scoring every match when it does not hold.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from om_core.read.search import SearchQuery

K1_PLUS_ONE = 2.2
"""FTS5's BM25 ``k1 + 1``: the most one word can add to a row's score, over its IDF."""
RARE_SHARE = 0.02
"""Words in at most this share of the indexed messages are scored; commoner ones are bounded."""
_HEX = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True)
class Narrowing:
    """A query split in two: the ``scored`` words (a row must hold one of them to be a
    candidate) and the ``bounded`` ones, which together add less than ``bound`` to any
    row's score."""

    scored: SearchQuery
    bounded: SearchQuery
    bound: float


def _idf(rows: int, documents: int) -> float:
    # FTS5's IDF, floored as FTS5 floors it.
    return max(math.log((rows - documents + 0.5) / (documents + 0.5)), 1e-6)


def narrowing(query: SearchQuery, documents: Mapping[str, int], rows: int) -> Narrowing | None:
    """The split of ``query`` by the words' document counts (``documents``, per indexed term)
    among ``rows`` indexed messages, or ``None`` when there is nothing to leave unscored.

    A word can be bounded only when its count is known: a word not in the vocabulary as
    written (the index holds Porter stems) is scored, as is one of hex digits alone, which
    could also be a tenant token (the vocabulary counts rows of either column, so its count
    could understate the word's IDF)."""
    cutoff = rows * RARE_SHARE
    scored: list[str] = []
    bounded: list[str] = []
    for term in query.terms:
        count = documents.get(term)
        common = count is not None and count > cutoff and not _HEX.fullmatch(term)
        (bounded if common else scored).append(term)
    if not bounded:
        return None
    if not scored:
        # Only common words: the rarest one is scored (still fewer rows than all of them).
        rarest = min(bounded, key=lambda term: documents[term])
        bounded.remove(rarest)
        scored.append(rarest)
        if not bounded:
            return None
    bound = sum(K1_PLUS_ONE * _idf(rows, documents[term]) for term in bounded)
    return Narrowing(SearchQuery(tuple(scored)), SearchQuery(tuple(bounded)), bound)
