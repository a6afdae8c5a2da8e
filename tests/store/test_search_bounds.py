"""The classes a SQLite search scores its rows by (pure arithmetic and match expressions)."""

from __future__ import annotations

import math
from itertools import combinations, permutations

import pytest

from om_core.read.search import SearchQuery
from om_workers.store.repositories.search_bounds import (
    K1_PLUS_ONE,
    MAX_UNITS,
    WordClass,
    beyond_reach,
    class_plan,
    idf,
)

ROWS = 10_000


def test_idf_is_fts5s_floored_at_half_the_rows() -> None:
    assert math.isclose(idf(ROWS, 900), math.log((ROWS - 900 + 0.5) / 900.5))
    assert idf(ROWS, 5_000) == 1e-6
    assert idf(ROWS, 9_000) == 1e-6


def _holds(word_class: WordClass, held: set[str]) -> bool:
    present = all(any(word in held for word in unit) for unit in word_class.present)
    return present and not any(word in held for unit in word_class.absent for word in unit)


@pytest.mark.parametrize("words", list(permutations(("osprey", "the", "bird"))))
def test_classes_partition_the_rows_by_the_words_they_hold_best_bound_first(
    words: tuple[str, ...],
) -> None:
    counts = {"osprey": 12, "the": 4_000, "bird": 900}
    plan = class_plan(SearchQuery(words), counts, ROWS)
    for size in range(1, len(words) + 1):
        for held in combinations(words, size):
            assert sum(_holds(c, set(held)) for c in plan.classes) == 1, held
    bounds = [c.bound for c in plan.classes]
    assert bounds == sorted(bounds, reverse=True)
    assert math.isclose(bounds[0], sum(K1_PLUS_ONE * idf(ROWS, n) for n in counts.values()))
    alone = next(c for c in plan.classes if c.present == (("bird",),))
    assert math.isclose(alone.bound, K1_PLUS_ONE * idf(ROWS, 900))
    assert alone.absent == tuple((w,) for w in words if w != "bird")
    # Expected shares of rows (words taken as independent) sum to the share holding any.
    assert math.isclose(sum(c.share for c in plan.classes), plan.share)
    assert math.isclose(plan.share, 1 - (1 - 12 / ROWS) * (1 - 0.4) * (1 - 0.09))


def test_a_unit_first_or_last_of_those_left_takes_the_others_as_one_class() -> None:
    counts = {"osprey": 12, "the": 4_000, "bird": 900}
    first = class_plan(SearchQuery(("osprey", "the", "bird")), counts, ROWS)
    assert [c.fts5() for c in first.classes] == [
        '"osprey" AND ("the" OR "bird")',
        '"osprey" NOT ("the" OR "bird")',
        '("the" AND "bird") NOT ("osprey")',
        '"bird" NOT ("osprey" OR "the")',
        '"the" NOT ("osprey" OR "bird")',
    ]
    # The rarest word between the others: one class per set of them it comes with.
    middle = class_plan(SearchQuery(("the", "osprey", "bird")), counts, ROWS)
    assert len(middle.classes) == 7


@pytest.mark.parametrize("words", list(permutations(("osprey", "the", "bird", "wing"))))
def test_every_class_names_the_words_a_row_may_hold_in_the_querys_order(
    words: tuple[str, ...],
) -> None:
    # FTS5 sums a row's words in the order the match names them: the same order as the
    # whole query's gives the same score to the bit.
    counts = {"osprey": 12, "the": 4_000, "bird": 900, "wing": 300}
    plan = class_plan(SearchQuery(words), counts, ROWS)
    for word_class in plan.classes:
        named = [word for unit in word_class.present for word in unit]
        assert named == [word for word in plan.order.terms if word in named]


def test_a_class_is_matched_by_every_word_once_in_the_querys_order() -> None:
    both = WordClass(present=(("a",), ("c",)), absent=(("b",),), bound=1.0)
    assert both.fts5() == '("a" AND "c") NOT ("b")'
    assert WordClass(present=(("a",),), absent=(), bound=1.0).fts5() == '"a"'
    assert WordClass(present=(("a",),), absent=(("b",),), bound=1.0).fts5() == '"a" NOT ("b")'
    plan = class_plan(SearchQuery(("c", "a", "b")), {"a": 5, "b": 6, "c": 7}, ROWS)
    assert plan.order.terms == ("c", "a", "b")


def test_words_past_the_units_form_one_unit_of_the_commonest() -> None:
    words = tuple(f"w{n}" for n in range(MAX_UNITS + 2))
    counts = {word: 10 * (n + 1) for n, word in enumerate(words)}
    plan = class_plan(SearchQuery(words), counts, ROWS)
    assert len(plan.classes) == 2 * MAX_UNITS - 1  # the rarest first: two classes a unit
    group = words[MAX_UNITS - 1 :]
    assert plan.order.terms == words  # the rarest first here, so the order is the query's
    alone = next(c for c in plan.classes if c.present == (group,))
    assert alone.fts5() == '("w4" OR "w5" OR "w6") NOT ("w0" OR "w1" OR "w2" OR "w3")'
    assert math.isclose(alone.bound, sum(K1_PLUS_ONE * idf(ROWS, counts[w]) for w in group))


@pytest.mark.parametrize("word", ["running", "beef"])
def test_words_of_unknown_count_or_of_hex_digits_are_never_bounded(word: str) -> None:
    # "running" is indexed as its stem; "beef" could be a tenant token as well as a word.
    plan = class_plan(SearchQuery((word, "the")), {"the": 4_000, "beef": 3_000}, ROWS)
    holding = [c for c in plan.classes if any(word in unit for unit in c.present)]
    assert all(c.bound == math.inf for c in holding)
    assert plan.classes[-1].present == (("the",),)


def test_a_class_is_beyond_reach_only_when_its_bound_is_below_the_last_score() -> None:
    word_class = WordClass(present=(("a",),), absent=(), bound=2.0)
    assert beyond_reach(word_class, -2.5)
    assert not beyond_reach(word_class, -2.0)
    assert not beyond_reach(word_class, -1.0)
