"""The statements a PostgreSQL search page tries (pure arithmetic over ts_rank's bounds)."""

from __future__ import annotations

import math

import pytest

from om_workers.store.repositories.search_postgresql import (
    COMMON_SHARE,
    RANK_ALL_ROWS,
    RANK_SLACK,
    Step,
    WordShare,
    lacking_bound,
    steps,
)


@pytest.mark.parametrize(
    ("held", "query", "bound"),
    [(0, 3, 0.0), (1, 3, 0.1 / 3), (2, 3, 0.2 / 3), (3, 3, 0.1), (5, 3, 0.1), (1, 0, 0.0)],
)
def test_a_row_holding_some_lexemes_ranks_at_most_their_full_weight(
    held: int, query: int, bound: float
) -> None:
    assert math.isclose(lacking_bound(held, query), bound, abs_tol=1e-12)


SCOPE_ROWS = 100_000


def _word(word: str, share: float, lexemes: int = 1) -> WordShare:
    return WordShare(word, lexemes, share)


@pytest.mark.parametrize(
    ("words", "lexemes", "planned"),
    [
        # One word: nothing to leave out.
        ([_word("osprey", 0.001)], 1, [Step("whole")]),
        # Words the statistics do not list: at most their few matches, ranked at once.
        ([_word("osprey", 0.0), _word("heron", 0.0)], 2, [Step("whole")]),
        # Common words alone: every word first, then all but the commonest.
        (
            [_word("the", 0.9), _word("said", 0.3), _word("well", 0.2)],
            3,
            [Step("every", 0.2 / 3), Step("rare", 0.1 / 3, ("said", "well")), Step("whole")],
        ),
        # Beside a common word: then the rows holding any other word, bounded by the
        # commonest word's lexemes (a hyphenated word has several).
        (
            [_word("osprey", 0.001), _word("well-known", 0.4, lexemes=3), _word("said", 0.3)],
            5,
            [Step("every", 0.08), Step("rare", 0.06, ("osprey", "said")), Step("whole")],
        ),
        (
            [_word("osprey", 0.001), _word("heron", COMMON_SHARE), _word("the", 0.9)],
            3,
            [Step("every", 0.2 / 3), Step("rare", 0.1 / 3, ("osprey", "heron")), Step("whole")],
        ),
        # Too few matches to be worth a step (here at most 1,000 of 100,000 rows).
        ([_word("osprey", 0.0), _word("heron", 0.01)], 2, [Step("whole")]),
    ],
)
def test_steps_try_the_likeliest_rows_first_and_end_with_the_whole_query(
    words: list[WordShare], lexemes: int, planned: list[Step]
) -> None:
    found = steps(words, lexemes, SCOPE_ROWS)
    assert [(s.match, s.rare_words) for s in found] == [(s.match, s.rare_words) for s in planned]
    assert all(math.isclose(a.bound, b.bound) for a, b in zip(found, planned, strict=True))


def test_a_page_settles_only_when_full_and_above_the_bound() -> None:
    step = Step("every", 0.05)
    assert step.settles([0.09, 0.07, 0.06], limit=3)
    assert not step.settles([0.09, 0.07], limit=3)  # rows left out may fill it
    assert not step.settles([0.09, 0.07, 0.05], limit=3)  # one left out may tie or pass it
    assert not step.settles([0.09, 0.07, 0.05 + RANK_SLACK / 2], limit=3)
    assert Step("whole").settles([], limit=3)


def test_a_small_scope_is_ranked_at_once_whatever_its_words() -> None:
    words = [_word("the", 0.9), _word("osprey", 0.001)]
    assert steps(words, 2, int(RANK_ALL_ROWS / 0.9) - 1) == [Step("whole")]
    assert [s.match for s in steps(words, 2, int(RANK_ALL_ROWS / 0.9) + 1)] == [
        "every",
        "rare",
        "whole",
    ]


def test_only_the_rare_step_binds_its_own_words() -> None:
    assert Step("rare", 0.05, ("osprey", "heron")).rare_text("osprey heron the") == "osprey heron"
    assert Step("every", 0.05).rare_text("osprey heron the") == "osprey heron the"
    assert Step("whole").rare_text("osprey") == "osprey"
