"""The vector side's cosine without a scope's common directions: a direction most vectors of a
scope share (a name most messages of a chat say) no longer outranks the message that matches
the rest of the query; a scope too small to estimate directions is scored as before."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from om_workers.store.common_directions import (
    MIN_VECTORS,
    SAMPLE,
    components_for,
    estimate,
)
from om_workers.store.repositories.vectors import MESSAGE, VectorChunk, pack
from om_workers.store.vectors import top_by_cosine

np = pytest.importorskip("numpy")

DIMENSION = 16
NAME, TOPIC = 0, 5


def _unit(vector: Any) -> Any:
    array = np.asarray(vector, dtype="float32")
    return array / np.linalg.norm(array)


def _chat(rng: Any, size: int) -> list[Any]:
    """``size`` messages: the first the answer (topic only), then alternately one that says
    the name (plus another topic) and one of another topic only."""
    basis = np.eye(DIMENSION, dtype="float32")
    others = [d for d in range(1, DIMENSION) if d != TOPIC]
    found = [_unit(basis[TOPIC] + 0.05 * rng.standard_normal(DIMENSION))]
    for n in range(size - 1):
        topic = basis[others[n % len(others)]]
        noise = 0.05 * rng.standard_normal(DIMENSION)
        found.append(_unit((0.9 * basis[NAME] if n % 2 else 0) + 0.4 * topic + noise))
    return found


def _stored(vectors: list[Any]) -> Iterator[VectorChunk]:
    packed = [pack(v.tolist()) for v in vectors]
    return iter([VectorChunk([MESSAGE] * len(vectors), list(range(len(vectors))), packed)])


def _query() -> tuple[float, ...]:
    basis = np.eye(DIMENSION, dtype="float32")
    return tuple(float(x) for x in _unit(basis[NAME] + 0.8 * basis[TOPIC]).tolist())


def test_a_direction_most_of_the_scope_shares_no_longer_outranks_the_answer() -> None:
    vectors = _chat(np.random.default_rng(7), 2 * MIN_VECTORS)
    plain = np.stack(vectors) @ np.asarray(_query(), dtype="float32")
    assert int(np.argmax(plain)) != 0  # the premise: by plain cosine a name-saying row wins
    ranked = top_by_cosine(_stored(vectors), _query(), depth=3)
    assert ranked[0].row == 0
    assert [k.rank for k in ranked] == sorted(k.rank for k in ranked)


def test_a_scope_too_small_to_estimate_is_ranked_by_the_plain_cosine() -> None:
    vectors = _chat(np.random.default_rng(3), MIN_VECTORS - 1)
    plain = np.stack(vectors) @ np.asarray(_query(), dtype="float32")
    ranked = top_by_cosine(_stored(vectors), _query(), depth=5)
    assert [k.row for k in ranked] == [int(n) for n in np.argsort(-plain)[:5]]
    assert [-k.rank for k in ranked] == pytest.approx(sorted(plain, reverse=True)[:5], abs=1e-6)
    assert estimate(np.stack(vectors)) is None


def test_the_corrected_rows_are_unit_length_and_a_row_at_the_mean_stays_zero() -> None:
    vectors = np.stack(_chat(np.random.default_rng(11), MIN_VECTORS))
    common = estimate(vectors)
    assert common is not None
    assert common.components.shape == (components_for(DIMENSION), DIMENSION)
    corrected = common.apply(np.vstack([vectors, common.mean]))
    norms = np.linalg.norm(corrected, axis=1)
    assert norms[:-1] == pytest.approx(np.ones(len(vectors)), abs=1e-5)
    assert norms[-1] == 0.0
    assert not np.isnan(corrected).any()


def test_the_statistics_read_a_bounded_sample_of_the_scope() -> None:
    rng = np.random.default_rng(5)
    head = rng.standard_normal((SAMPLE, DIMENSION)).astype("float32")
    tail = 100 + rng.standard_normal((50, DIMENSION)).astype("float32")
    common = estimate(np.vstack([head, tail]))
    assert common is not None
    assert common.mean == pytest.approx(head.mean(axis=0), abs=1e-5)


@pytest.mark.parametrize(("dimension", "removed"), [(16, 1), (384, 6), (768, 12), (1536, 23)])
def test_the_components_removed_grow_with_the_dimension(dimension: int, removed: int) -> None:
    assert components_for(dimension) == removed


def test_scores_are_the_cosines_of_the_corrected_rows() -> None:
    vectors = np.stack(_chat(np.random.default_rng(13), 2 * MIN_VECTORS))
    common = estimate(vectors)
    assert common is not None
    query = common.apply(np.asarray([_query()], dtype="float32"))[0]
    expected = common.apply(vectors) @ query
    assert common.scores(vectors, query) == pytest.approx(expected, abs=1e-4)


def test_a_sample_seen_before_reuses_its_statistics_and_a_changed_one_does_not() -> None:
    vectors = np.stack(_chat(np.random.default_rng(17), MIN_VECTORS + 1))
    first = estimate(vectors)
    assert first is not None and estimate(vectors.copy()) is first
    changed = vectors.copy()
    changed[1] = _unit(changed[1] + 0.5)
    again = estimate(changed)
    assert again is not None and again is not first
    assert not np.allclose(again.mean, first.mean)
