"""Reciprocal-rank fusion, by table: what each ranking gives and what comes out first."""

from __future__ import annotations

import pytest

from om_core.read.fusion import RRF_K, fuse

CASES = [
    # (rankings, k, expected order)
    ([["a", "b", "c"]], RRF_K, ["a", "b", "c"]),
    ([["a", "b"], ["b", "a"]], RRF_K, ["a", "b"]),  # a tie keeps first appearance
    ([["a", "b", "c"], ["b", "d"]], RRF_K, ["b", "a", "d", "c"]),  # found twice beats once
    ([["a", "x"], []], RRF_K, ["a", "x"]),
    ([[], []], RRF_K, []),
    ([["a", "a", "b"]], RRF_K, ["a", "b"]),  # a repeat counts once, at its best place
    ([["a", "b"], ["c", "b"]], 1, ["b", "a", "c"]),  # 1/2+1/3 > 1/2 (a) > 1/2 (c, later)
]


@pytest.mark.parametrize(("rankings", "k", "expected"), CASES)
def test_fused_order(rankings: list[list[str]], k: int, expected: list[str]) -> None:
    assert [item for item, _ in fuse(rankings, k)] == expected


def test_scores_are_sums_of_reciprocal_ranks() -> None:
    fused = dict(fuse([["a", "b"], ["b"]], k=60))
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)


def test_k_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        fuse([["a"]], k=0)
