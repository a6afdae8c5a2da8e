"""Reciprocal-rank fusion: one ranking from several, by rank alone.

Each list gives an item ``1 / (k + rank)`` (rank from 1); an item's fused score is the sum over
the lists it is in. Scores of different engines (BM25 levels, cosine) are not comparable,
ranks are, so no list needs calibrating; ``k`` (60, the usual choice) damps the head of each
list so that an item found by both engines beats one found high by only one.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

RRF_K = 60
"""The damping constant of :func:`fuse`."""

K = TypeVar("K", bound=Hashable)


def fuse(rankings: Sequence[Sequence[K]], k: int = RRF_K) -> list[tuple[K, float]]:
    """The items of ``rankings`` (each best first; an item repeated within one list counts at
    its best place) with their fused scores, best first; ties keep the order of first
    appearance (list by list, place by place). Raises ``ValueError`` for ``k < 1``."""
    if k < 1:
        raise ValueError("the fusion constant k must be at least 1")
    scores: dict[K, float] = {}
    for ranking in rankings:
        seen: set[K] = set()
        for place, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + place)
    order = {item: n for n, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda pair: (-pair[1], order[pair[0]]))


__all__ = ["RRF_K", "fuse"]
