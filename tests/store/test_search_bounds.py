"""Which words of a SQLite search are scored and which are bounded (pure arithmetic)."""

from __future__ import annotations

import math

from om_core.read.search import SearchQuery
from om_workers.store.repositories.search_bounds import K1_PLUS_ONE, narrowing

ROWS = 10_000


def _idf(documents: int) -> float:
    return math.log((ROWS - documents + 0.5) / (documents + 0.5))


def test_common_words_are_bounded_by_their_largest_share_of_a_score() -> None:
    plan = narrowing(
        SearchQuery(("osprey", "the", "bird")), {"osprey": 12, "the": 4_000, "bird": 900}, ROWS
    )
    assert plan is not None
    assert plan.scored.terms == ("osprey",)
    assert plan.bounded.terms == ("the", "bird")
    assert math.isclose(plan.bound, K1_PLUS_ONE * (_idf(4_000) + _idf(900)))


def test_nothing_is_left_unscored_when_every_word_is_rare() -> None:
    assert narrowing(SearchQuery(("osprey", "heron")), {"osprey": 12, "heron": 3}, ROWS) is None


def test_of_common_words_alone_the_rarest_is_scored() -> None:
    plan = narrowing(SearchQuery(("the", "bird")), {"the": 4_000, "bird": 900}, ROWS)
    assert plan is not None
    assert (plan.scored.terms, plan.bounded.terms) == (("bird",), ("the",))
    assert narrowing(SearchQuery(("the",)), {"the": 4_000}, ROWS) is None


def test_words_of_unknown_count_or_of_hex_digits_are_always_scored() -> None:
    # "running" is indexed as its stem; "beef" could be a tenant token as well as a word.
    counts = {"the": 4_000, "beef": 3_000}
    plan = narrowing(SearchQuery(("running", "beef", "the")), counts, ROWS)
    assert plan is not None
    assert (plan.scored.terms, plan.bounded.terms) == (("running", "beef"), ("the",))
