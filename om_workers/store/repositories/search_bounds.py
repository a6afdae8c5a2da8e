"""The plan of a SQLite search: its rows split into classes by which words they hold, each
class with a bound on the score of any row in it.

FTS5 scores every row a match names (it has no top-k pruning), and a score costs far more than
a match (about 0.7 µs against 50 ns a row), so a query holding common words would score most of a
large session. Its BM25 is a sum over the query's words, and a word's share of a row's score is
below ``idf * (k1 + 1)`` whatever the row (FTS5's ``k1`` is 1.2). So the rows holding exactly a
given set of the words (a *class*) score below the sum of those words' bounds, and the classes
are scored best bound first: once a page is full and its last row scores above the next
class's bound, no row of that class or of any later one can reach the page (the MaxScore
argument, per set of words). Rows holding the rare words are few and their bounds high; the
classes made of common words alone, which hold most rows, are the ones left unscored.

A class is matched by an expression naming every word once (``(a AND c) NOT (b)``), so FTS5
scores each of its rows exactly as the whole query would: a word a row lacks adds exactly 0.0,
and the words it holds are added in the same order (:attr:`ClassPlan.order`: the query's,
with the words of a query of more than :data:`MAX_UNITS` that share a unit last).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from om_core.read.search import SearchQuery

K1_PLUS_ONE = 2.2
"""FTS5's BM25 ``k1 + 1``: the most one word can add to a row's score, over its IDF."""
MAX_UNITS = 5
"""Most units a query is split into (31 classes at most): the words past the first four (by
bound, highest first) form one unit, present when the row holds any of them."""
RANK_SLACK = 1e-6
"""Room for floating-point differences between a bound (summed here) and FTS5's own sums."""
_HEX = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True)
class WordClass:
    """The rows holding some word of each unit of ``present`` and no word of ``absent``; none
    of them scores ``bound`` or more (``inf`` when a word's document count is unknown)."""

    present: tuple[tuple[str, ...], ...]
    absent: tuple[tuple[str, ...], ...]
    bound: float
    share: float = 1.0
    """The share of the scope's rows expected in the class (were words independent)."""

    def fts5(self) -> str:
        """The FTS5 expression matching exactly this class's rows, every word quoted once."""
        held = " AND ".join(_unit(u) for u in self.present)
        if not self.absent:
            return held
        if len(self.present) > 1:
            held = f"({held})"
        return f"{held} NOT ({' OR '.join(_unit(u) for u in self.absent)})"


@dataclass(frozen=True)
class ClassPlan:
    """A query's classes, best bound first, and the order of its words: the whole query's
    match must name them in this order so that its scores equal the classes' to the bit.
    ``share`` is the share of rows expected to hold any of the words."""

    order: SearchQuery
    classes: tuple[WordClass, ...]
    share: float


def _unit(words: Sequence[str]) -> str:
    quoted = " OR ".join(f'"{word}"' for word in words)
    return quoted if len(words) == 1 else f"({quoted})"


def idf(rows: int, documents: int) -> float:
    """FTS5's IDF of a word in ``documents`` of ``rows`` indexed rows, floored as FTS5 floors
    it (a word in half the rows or more weighs 1e-6)."""
    return max(math.log((rows - documents + 0.5) / (documents + 0.5)), 1e-6)


def word_bound(word: str, documents: Mapping[str, int], rows: int) -> float:
    """The most ``word`` can add to a row's score: ``inf`` when its count is unknown (a word
    not in the vocabulary as written: the index holds Porter stems) or when it is hex digits
    alone, which could also be a tenant token (the vocabulary counts rows of either column,
    so its count could overstate the word's and its bound understate it)."""
    count = documents.get(word)
    if count is None or _HEX.fullmatch(word):
        return math.inf
    return K1_PLUS_ONE * idf(rows, count)


def _units(query: SearchQuery, bounds: Mapping[str, float]) -> list[tuple[str, ...]]:
    ranked = sorted(query.terms, key=lambda word: -bounds[word])
    singles = set(ranked[: MAX_UNITS - 1]) if len(ranked) > MAX_UNITS else set(ranked)
    units: list[tuple[str, ...]] = [(word,) for word in query.terms if word in singles]
    rest = tuple(word for word in query.terms if word not in singles)
    return [*units, rest] if rest else units


def class_plan(query: SearchQuery, documents: Mapping[str, int], rows: int) -> ClassPlan:
    """The classes of ``query``'s rows among ``rows`` indexed messages, given the words'
    document counts (``documents``; a word of unknown count is taken to be in every row), in
    the order to score them: highest bound first, and of equal bounds the class holding more
    units first."""
    bounds = {word: word_bound(word, documents, rows) for word in query.terms}
    units = _units(query, bounds)
    absent_share = [
        math.prod(1 - min(documents.get(w, rows) / max(rows, 1), 1.0) for w in unit)
        for unit in units
    ]
    unit_bounds = [sum(bounds[word] for word in unit) for unit in units]
    classes: list[WordClass] = []
    for size in range(len(units), 0, -1):
        for chosen in combinations(range(len(units)), size):
            others = [i for i in range(len(units)) if i not in chosen]
            classes.append(
                WordClass(
                    present=tuple(units[i] for i in chosen),
                    absent=tuple(units[i] for i in others),
                    bound=sum(unit_bounds[i] for i in chosen),
                    share=math.prod(1 - absent_share[i] for i in chosen)
                    * math.prod(absent_share[i] for i in others),
                )
            )
    classes.sort(key=lambda c: (-c.bound, -len(c.present)))
    order = SearchQuery(tuple(word for unit in units for word in unit))
    return ClassPlan(order, tuple(classes), 1 - math.prod(absent_share))


def beyond_reach(word_class: WordClass, last_rank: float) -> bool:
    """Whether no row of ``word_class`` can rank at or before ``last_rank`` (FTS5's rank: the
    negated score)."""
    return word_class.bound < -last_rank - RANK_SLACK
