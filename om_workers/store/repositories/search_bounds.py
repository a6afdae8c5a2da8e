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

Every statement costs FTS5 a count of each word's rows in the whole index (its IDF), so
classes are merged where an expression can still name each word once in that order: the rows
holding the word of highest bound with some of the other words are one class (``a AND (b OR
c)``) when those words all stand on one side of it in the query. The merged class is bounded
by its best member, so it is scored whenever that member would be, and the classes that went
into it rarely fall out of reach of a page that member left unfinished (their bounds differ
by the commonest words' small ones).
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


@dataclass(frozen=True)
class _Region:
    """Rows holding every unit of ``held`` (by index; ``-1`` stands for "some unit of
    ``some``", placed where those units stand in the query) and no unit of ``lacking``."""

    held: list[int]
    some: list[int]
    lacking: list[int]


def _regions(units: Sequence[tuple[str, ...]], bounds: Sequence[float]) -> list[_Region]:
    """The rows holding any unit, split unit by unit, highest bound first: the rows holding
    that unit and none peeled before it, then the rest. Those rows go in two regions (holding
    some other remaining unit, or none) when the other remaining units all stand on one side of
    it in the query's order, so that an expression naming them as one ``OR`` keeps every word
    a row holds in the query's order; else one class per set of them it holds."""
    remaining, peeled = list(range(len(units))), list[int]()
    regions: list[_Region] = []
    while remaining:
        top = max(remaining, key=lambda i: bounds[i])
        others = [i for i in remaining if i != top]
        if others and (max(others) < top or min(others) > top):
            some = [top, -1] if min(others) > top else [-1, top]
            regions.append(_Region(some, others, list(peeled)))
            regions.append(_Region([top], [], [*peeled, *others]))
        else:
            for size in range(len(others), -1, -1):
                for chosen in combinations(others, size):
                    lacking = [i for i in others if i not in chosen]
                    regions.append(_Region(sorted([top, *chosen]), [], [*peeled, *lacking]))
        peeled.append(top)
        remaining = others
    return regions


def class_plan(query: SearchQuery, documents: Mapping[str, int], rows: int) -> ClassPlan:
    """The classes of ``query``'s rows among ``rows`` indexed messages, given the words'
    document counts (``documents``; a word of unknown count is taken to be in every row), in
    the order to score them: highest bound first, and of equal bounds the class holding more
    units first. A class here may be a union of exact classes (see :func:`_regions`): fewer
    statements, each of which counts its words anew, for a bound no lower than its best
    member's."""
    bounds = {word: word_bound(word, documents, rows) for word in query.terms}
    units = _units(query, bounds)
    absent_share = [
        math.prod(1 - min(documents.get(w, rows) / max(rows, 1), 1.0) for w in unit)
        for unit in units
    ]
    unit_bounds = [sum(bounds[word] for word in unit) for unit in units]
    classes: list[WordClass] = []
    for region in _regions(units, unit_bounds):
        some = tuple(word for i in region.some for word in units[i])
        present = tuple(units[i] if i >= 0 else some for i in region.held)
        held = [i for i in region.held if i >= 0]
        classes.append(
            WordClass(
                present=present,
                absent=tuple(units[i] for i in sorted(region.lacking)),
                bound=sum(unit_bounds[i] for i in (*held, *region.some)),
                share=math.prod(1 - absent_share[i] for i in held)
                * (1 - math.prod(absent_share[i] for i in region.some) if region.some else 1.0)
                * math.prod(absent_share[i] for i in region.lacking),
            )
        )
    classes.sort(key=lambda c: (-c.bound, -len(c.present)))
    order = SearchQuery(tuple(word for unit in units for word in unit))
    return ClassPlan(order, tuple(classes), 1 - math.prod(absent_share))


def beyond_reach(word_class: WordClass, last_rank: float) -> bool:
    """Whether no row of ``word_class`` can rank at or before ``last_rank`` (FTS5's rank: the
    negated score)."""
    return word_class.bound < -last_rank - RANK_SLACK
