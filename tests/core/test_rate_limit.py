"""GCRA arithmetic (:mod:`om_core.policy.rate_limit`) as a table: burst, refill, retry-after,
TTL."""

from __future__ import annotations

import pytest

from om_core.errors import InvalidInputError
from om_core.policy.rate_limit import (
    Decision,
    RateLimit,
    decide,
    lease_size,
    retry_after_header_s,
)

NOW = 1_700_000_000_000_000  # a realistic microsecond clock: exactness must hold at this size

# (stored TAT offset from NOW or None, interval µs, burst, expected decision with offsets)
CASES: list[tuple[int | None, int, int, tuple[bool, int, int | None, int]]] = [
    # Empty bucket: allowed, TAT one interval ahead, key lives that long.
    (None, 100_000, 3, (True, 0, 100_000, 100)),
    # A TAT in the past is a full bucket, not credit.
    (-5_000_000, 100_000, 3, (True, 0, 100_000, 100)),
    # Second and third of a burst of 3.
    (100_000, 100_000, 3, (True, 0, 200_000, 200)),
    (200_000, 100_000, 3, (True, 0, 300_000, 300)),
    # Burst + 1: refused, wait exactly one interval, nothing stored.
    (300_000, 100_000, 3, (False, 100_000, None, 0)),
    # Part of an interval has refilled: passes; otherwise wait only the rest.
    (150_000, 100_000, 3, (True, 0, 250_000, 250)),
    (250_000, 100_000, 3, (False, 50_000, None, 0)),
    (270_001, 100_000, 1, (False, 270_001, None, 0)),
    # Burst 1: one at a time.
    (None, 1_000_000, 1, (True, 0, 1_000_000, 1000)),
    (1, 1_000_000, 1, (False, 1, None, 0)),
    # TTL rounds up to a whole millisecond.
    (None, 1_500, 1, (True, 0, 1_500, 2)),
]


@pytest.mark.parametrize(("offset", "interval", "burst", "expected"), CASES)
def test_decide(
    offset: int | None, interval: int, burst: int, expected: tuple[bool, int, int | None, int]
) -> None:
    allowed, retry_after, tat, ttl = expected
    stored = None if offset is None else NOW + offset
    tat_us = None if tat is None else NOW + tat
    want = Decision(allowed, retry_after, tat_us, ttl, granted=1 if allowed else 0)
    assert decide(stored, NOW, interval, burst) == want


def test_exactly_the_burst_passes_then_one_per_interval() -> None:
    limit = RateLimit(rate_per_s=10, burst=4)
    tat: int | None = None
    verdicts = []
    for _ in range(5):
        decision = decide(tat, NOW, limit.interval_us, limit.burst)
        verdicts.append(decision.allowed)
        tat = decision.tat_us if decision.allowed else tat
    assert verdicts == [True, True, True, True, False]
    refused = decide(tat, NOW, limit.interval_us, limit.burst)
    later = NOW + refused.retry_after_us
    assert decide(tat, later, limit.interval_us, limit.burst).allowed
    assert not decide(tat, later - 1, limit.interval_us, limit.burst).allowed


@pytest.mark.parametrize(
    ("retry_after_us", "header"),
    [(0, 1), (1, 1), (999_999, 1), (1_000_000, 1), (1_000_001, 2), (2_500_000, 3)],
)
def test_retry_after_header_is_whole_seconds_at_least_one(retry_after_us: int, header: int) -> None:
    assert retry_after_header_s(retry_after_us) == header


@pytest.mark.parametrize(
    ("rate", "burst", "interval"), [(20, 40, 50_000), (0.5, 1, 2_000_000), (3, 1, 333_333)]
)
def test_interval(rate: float, burst: int, interval: int) -> None:
    assert RateLimit(rate, burst).interval_us == interval


@pytest.mark.parametrize(
    ("rate", "burst"), [(0, 1), (-1, 1), (float("inf"), 1), (float("nan"), 1), (1, 0), (2e6, 1)]
)
def test_invalid_limits_are_refused(rate: float, burst: int) -> None:
    with pytest.raises(InvalidInputError):
        RateLimit(rate, burst)


# (stored TAT offset or None, interval µs, burst, wanted, expected (allowed, TAT offset, granted))
LEASES: list[tuple[int | None, int, int, int, tuple[bool, int | None, int]]] = [
    # A full bucket grants the whole lease at once; the TAT moves by all of it.
    (None, 100_000, 10, 4, (True, 400_000, 4)),
    # Only what would pass one after another: 3 of 4 when 7 of a burst of 10 are spent.
    (700_000, 100_000, 10, 4, (True, 1_000_000, 3)),
    # The last one alone, then nothing: a lease never goes past the burst.
    (900_000, 100_000, 10, 4, (True, 1_000_000, 1)),
    (1_000_000, 100_000, 10, 4, (False, None, 0)),
    # Wanting none is wanting one.
    (None, 100_000, 10, 0, (True, 100_000, 1)),
]


@pytest.mark.parametrize(("offset", "interval", "burst", "wanted", "expected"), LEASES)
def test_decide_grants_a_lease_of_what_would_pass_one_after_another(
    offset: int | None,
    interval: int,
    burst: int,
    wanted: int,
    expected: tuple[bool, int | None, int],
) -> None:
    allowed, tat, granted = expected
    stored = None if offset is None else NOW + offset
    decision = decide(stored, NOW, interval, burst, wanted)
    assert (decision.allowed, decision.granted) == (allowed, granted)
    assert decision.tat_us == (None if tat is None else NOW + tat)
    # Granting n at once leaves the bucket where n single requests would have.
    single = stored
    for _ in range(granted):
        single = decide(single, NOW, interval, burst).tat_us
    assert not allowed or single == decision.tat_us


@pytest.mark.parametrize(
    ("rate", "burst", "size"),
    [(300, 600, 15), (300, 100, 5), (1000, 100_000, 50), (10, 20, 1), (0.5, 1, 1), (40, 2, 1)],
)
def test_lease_size_is_a_twentieth_of_the_burst_or_of_a_second_at_least_one(
    rate: float, burst: int, size: int
) -> None:
    assert lease_size(RateLimit(rate, burst)) == size
