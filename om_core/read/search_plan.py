"""The order in which an index of levelled terms answers a query, best rows first.

A row's score is a sum over the query's stems of ``idf * weight(level)`` (see
:mod:`om_core.read.search_terms`), so every row holding exactly the same level of each stem
(or lacking the same stems) scores exactly the same. Such a set of rows is a *combination*,
matched by one expression (``("leas_3" AND "march_5") NOT ("rent_0" OR "rent_4")``) that an
index answers in row order and can stop after a page; combinations are taken best score
first, so a search ends as soon as a page is full and the next combination scores below it.
Nothing is scored row by row, and a stem found in most rows costs no more than a rare one.

Rows holding a rare stem are fewer than the combinations that would name them; a store scores
those rows from their terms instead (:func:`score`), and leaves them out of the combinations.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from om_core.read.search import SearchKey
from om_core.read.search_terms import level_weight, term

RARE_SHARE = 0.1
"""A stem in at most this share of the index's rows is rare enough to meet others like it
seldom (see :class:`EmptySets`)."""
MAX_SCORED_STEMS = 4
"""Most stems of a query that are searched: those of highest IDF (a question's names and
rare words). The commonest words of a long question add little to a score and much to a
search's cost: each stem multiplies the combinations a search may have to ask (on the LoCoMo
questions, the rarest four find evidence as often as all of them)."""


@dataclass(frozen=True)
class PlanWord:
    """A query stem as an index knows it: its IDF and the levels it may be held at (every
    level some row holds it at must be among them; more are harmless)."""

    stem: str
    idf: float
    levels: tuple[int, ...]

    def terms(self) -> tuple[str, ...]:
        """The index terms of this stem at its levels."""
        return tuple(term(self.stem, level) for level in self.levels)


def places(words: Sequence[PlanWord]) -> list[tuple[int, int]]:
    """Every place ``(word, level)`` of ``words``, in order (as :meth:`PlanWord.terms`)."""
    return [(i, level) for i, word in enumerate(words) for level in word.levels]


def terms_at(words: Sequence[PlanWord], at: Iterable[tuple[int, int]]) -> list[str]:
    """The index terms of the places ``at`` (``(word, level)``) of ``words``."""
    return [term(words[i].stem, level) for i, level in at]


@dataclass(frozen=True)
class Syntax:
    """How one index writes its match expressions: a term (quoted, never syntax) and the
    operators joining them."""

    quote: Callable[[str], str]
    both: str
    either: str
    but_not: str

    def any_of(self, terms: Iterable[str]) -> str:
        """The expression of rows holding any of ``terms``."""
        return self.either.join(map(self.quote, terms))

    def all_of(self, expressions: Iterable[str]) -> str:
        """The expression of rows matching every one of ``expressions`` (each bracketed)."""
        return self.both.join(f"({e})" for e in expressions)

    def without(self, expression: str, terms: Sequence[str]) -> str:
        """The expression of rows matching ``expression`` and holding none of ``terms``."""
        return f"({expression}){self.but_not}({self.any_of(terms)})" if terms else expression


def _tsquery_lexeme(index_term: str) -> str:
    # Inside a tsquery's quotes, a quote and a backslash are doubled.
    return "'" + index_term.replace("\\", "\\\\").replace("'", "''") + "'"


FTS5 = Syntax(lambda index_term: f'"{index_term}"', " AND ", " OR ", " NOT ")
"""SQLite FTS5's match expressions (index terms are ASCII letters, digits and underscores)."""
TSQUERY = Syntax(_tsquery_lexeme, " & ", " | ", " & !")
"""PostgreSQL's ``tsquery`` text (a lexeme may hold any character)."""


def score(words: Sequence[PlanWord], levels: Mapping[int, int]) -> float:
    """The score of a row holding ``words[i]`` at ``levels[i]`` (and no other word), summed in
    the words' order so that equal rows get equal scores to the bit."""
    total = 0.0
    for i, word in enumerate(words):
        level = levels.get(i)
        if level is not None:
            total += word.idf * level_weight(level)
    return total


_LEVEL_BITS = 4
"""Bits of one word's place in a row's packed levels (a level plus one: 0 is "not held")."""


def held_at(word: int, level: int) -> int:
    """A row holding ``words[word]`` at ``level``, packed: a row's levels are the sum of one
    of these per word it holds, so the rows a search reads are a dict of ints, and rows holding
    the same levels (most of them) share one score."""
    return (level + 1) << (_LEVEL_BITS * word)


def rows_held(found: Iterable[tuple[int, int]], asked: Sequence[tuple[int, int]]) -> dict[int, int]:
    """The rows of ``found`` (``(n, row)``: ``row`` holds the place ``asked[n]``, a
    ``(word, level)``), each with the packed levels of every place it was found at."""
    packed = [held_at(word, level) for word, level in asked]
    held: dict[int, int] = {}
    for n, row in found:
        held[row] = held.get(row, 0) + packed[n]
    return held


def _unpacked(packed: int, words: int) -> dict[int, int]:
    mask = (1 << _LEVEL_BITS) - 1
    places = ((i, packed >> (_LEVEL_BITS * i) & mask) for i in range(words))
    return {i: place - 1 for i, place in places if place}


def best_keys(
    words: Sequence[PlanWord],
    held: Mapping[int, int],
    source: int,
    limit: int,
    after: SearchKey | None,
) -> list[SearchKey]:
    """The best ``limit`` keys after ``after`` of the rows of ``held`` (each row's packed
    levels, sums of :func:`held_at`), scored as :func:`score` scores them."""
    ranks = {packed: -score(words, _unpacked(packed, len(words))) for packed in set(held.values())}
    keys: Iterable[tuple[float, int, int]] = ((ranks[p], source, row) for row, p in held.items())
    if after is not None:
        cursor = (after.rank, after.source, after.row)
        keys = (key for key in keys if key > cursor)
    return [SearchKey(*key) for key in heapq.nsmallest(limit, keys)]


@dataclass(frozen=True)
class Combination:
    """The rows holding each of ``held`` (one term per stem: the terms of the ``words`` at
    those places of the plan) and none of ``lacking`` (every term of the other stems), all
    scoring ``score``."""

    score: float
    held: tuple[str, ...]
    lacking: tuple[str, ...]
    words: tuple[int, ...]
    packed: int = 0
    """The levels of its rows, packed as :func:`held_at` packs them."""

    def match(self, syntax: Syntax, excluded: Sequence[str] = ()) -> str:
        """The expression of these rows, without those holding any of ``excluded``."""
        held = syntax.both.join(map(syntax.quote, self.held))
        return syntax.without(held, (*self.lacking, *excluded))


def _options(word: PlanWord) -> list[int | None]:
    # Highest weight first, then "lacks the stem".
    return [*sorted(word.levels, reverse=True), None]


def combinations(words: Sequence[PlanWord]) -> Iterator[tuple[Combination, ...]]:
    """Every combination of ``words`` holding at least one of them, in groups of equal score,
    best group first (lazily: a search stops early)."""
    options = [_options(word) for word in words]
    if not options:
        return

    def levels_of(at: tuple[int, ...]) -> dict[int, int]:
        return {i: level for i, o in enumerate(at) if (level := options[i][o]) is not None}

    def make(at: tuple[int, ...]) -> Combination:
        levels = levels_of(at)
        held = tuple(terms_at(words, levels.items()))
        absent = [words[i] for i, o in enumerate(at) if options[i][o] is None]
        lacking = tuple(t for word in absent for t in word.terms())
        packed = sum(held_at(i, level) for i, level in levels.items())
        return Combination(score(words, levels), held, lacking, tuple(levels), packed)

    start = tuple(0 for _ in options)
    heap: list[tuple[float, tuple[int, ...]]] = [(-score(words, levels_of(start)), start)]
    seen = {start}
    group: list[Combination] = []
    while heap:
        negated, at = heapq.heappop(heap)
        if group and -negated != group[0].score:
            yield tuple(group)
            group = []
        for i in range(len(at)):
            if at[i] + 1 < len(options[i]):
                nxt = (*at[:i], at[i] + 1, *at[i + 1 :])
                if nxt not in seen:
                    seen.add(nxt)
                    heapq.heappush(heap, (-score(words, levels_of(nxt)), nxt))
        if levels_of(at):
            group.append(make(at))
    if group:
        yield tuple(group)


def read_places(
    words: Sequence[PlanWord], documents: Sequence[Mapping[int, int]], budget: float
) -> list[tuple[int, int]]:
    """The places ``(word, level)`` whose rows a store reads and scores one by one (the rest
    it takes by combination): the rarest, as counted in ``documents`` (per word, rows per
    level; a level not counted counts none), while their rows stay within ``budget``."""
    places = sorted(
        (documents[i].get(level, 0), i, level)
        for i, word in enumerate(words)
        for level in word.levels
    )
    read: list[tuple[int, int]] = []
    total = 0
    for rows, i, level in places:
        total += rows
        if total > budget:
            break
        read.append((i, level))
    return sorted(read)


@dataclass
class EmptySets:
    """Sets of a search's rare words (``rare``: their places among the combined ``words``):
    a set no row holds together, at the combined levels, empties every combination holding
    it. Combinations come best first, so those holding the most rare words come early, and
    one probe of such a set (a statement asking for one row) replaces one for each of them.

    A store whose statements cost more than its rows (PostgreSQL) may read a set's rows
    instead, with their levels (:meth:`learn_rows`): every combination holding the set is then
    answered from them, without a statement."""

    words: Sequence[PlanWord]
    rare: frozenset[int]
    _probed: set[frozenset[int]] = field(default_factory=set)
    _empty: list[frozenset[int]] = field(default_factory=list)
    _rows: dict[frozenset[int], dict[int, list[int]]] = field(default_factory=dict)

    def _core(self, combination: Combination) -> frozenset[int]:
        return frozenset(i for i in combination.words if i in self.rare)

    def empty(self, combination: Combination) -> bool:
        """Whether ``combination`` holds a set known to be empty."""
        core = self._core(combination)
        return any(known <= core for known in self._empty)

    def unprobed(self, batch: Sequence[Combination]) -> list[frozenset[int]]:
        """The sets of two rare words or more that ``batch`` holds and no probe asked yet."""
        cores = {self._core(c) for c in batch}
        return sorted((c for c in cores if len(c) > 1 and c not in self._probed), key=sorted)

    def terms(self, core: frozenset[int]) -> list[tuple[str, ...]]:
        """The terms of each word of ``core`` at its combined levels: the rows holding
        ``core`` hold one of each."""
        return [self.words[i].terms() for i in sorted(core)]

    def match(self, syntax: Syntax, core: frozenset[int]) -> str:
        """The expression of rows holding every word of ``core`` at a combined level."""
        return syntax.all_of(map(syntax.any_of, self.terms(core)))

    def learn(self, probed: Sequence[frozenset[int]], found: set[int]) -> None:
        """Record the probes of ``probed``: ``found`` holds the places of those with a row."""
        self._probed.update(probed)
        self._empty.extend(core for n, core in enumerate(probed) if n not in found)

    def learn_rows(self, core: frozenset[int], rows: Mapping[int, int] | None) -> None:
        """Record every row holding ``core`` (each with its levels of ``words``, packed), or
        that they were too many to read (``None``)."""
        self._probed.add(core)
        if rows is None:
            return
        if not rows:
            self._empty.append(core)
            return
        by_levels: dict[int, list[int]] = {}
        for row, packed in rows.items():
            by_levels.setdefault(packed, []).append(row)
        self._rows[core] = by_levels

    def rows_of(self, combination: Combination) -> list[int] | None:
        """The rows of ``combination``, when a set it holds was read (else ``None``)."""
        core = self._core(combination)
        for known, by_levels in self._rows.items():
            if known <= core:
                return by_levels.get(combination.packed, [])
        return None
