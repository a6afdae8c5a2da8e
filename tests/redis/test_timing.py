"""Timing rules as tables: heartbeat, TTLs, time limits, redelivery."""

from __future__ import annotations

import math

import pytest

from om_workers.coordination import timing


@pytest.mark.parametrize(
    ("ttl_s", "interval_s"), [(60.0, 20.0), (0.3, 0.1), (1.0, 1 / 3), (90, 30.0)]
)
def test_heartbeat_is_a_third_of_the_ttl(ttl_s: float, interval_s: float) -> None:
    assert timing.heartbeat_interval_s(ttl_s) == pytest.approx(interval_s)


@pytest.mark.parametrize(("ttl_s", "ms"), [(60.0, 60_000), (0.3, 300), (0.0001, 1), (1.0004, 1001)])
def test_ttl_ms_rounds_up_and_is_never_zero(ttl_s: float, ms: int) -> None:
    assert timing.ttl_ms(ttl_s) == ms


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan])
def test_ttls_must_be_positive_and_finite(bad: float) -> None:
    with pytest.raises(ValueError):
        timing.heartbeat_interval_s(bad)
    with pytest.raises(ValueError):
        timing.ttl_ms(bad)
    with pytest.raises(ValueError):
        timing.lock_valid_until_s(10.0, bad)


def test_lock_validity_counts_from_before_the_command() -> None:
    assert timing.lock_valid_until_s(100.0, 30.0) == 130.0


# attempt, random(), retry_after_s, expected delay (base 1 s, cap 30 s)
@pytest.mark.parametrize(
    ("deliveries", "limit", "exhausted"), [(1, 1, False), (2, 1, True), (3, 3, False), (4, 3, True)]
)
def test_redelivery_limit(deliveries: int, limit: int, exhausted: bool) -> None:
    assert timing.redelivery_exhausted(deliveries, max_deliveries=limit) is exhausted


@pytest.mark.parametrize(("deliveries", "limit"), [(0, 3), (1, 0)])
def test_redelivery_rejects_bad_input(deliveries: int, limit: int) -> None:
    with pytest.raises(ValueError):
        timing.redelivery_exhausted(deliveries, max_deliveries=limit)


@pytest.mark.parametrize(
    ("http", "attempts", "cap", "wait"),
    [(30.0, 3, 10.0, 60.0), (1.0, 1, 1.0, 0.0), (120, 5, 60, 600)],
)
def test_derived_time_limits_are_ordered_and_cover_the_retry_chain(
    http: float, attempts: int, cap: float, wait: float
) -> None:
    limits = timing.derive_time_limits(
        http_timeout_s=http, max_attempts=attempts, backoff_cap_s=cap, queue_wait_s=wait
    )
    chain = attempts * http + (attempts - 1) * cap
    assert limits.http_timeout_s == http
    assert limits.soft_time_limit_s >= 3 * chain
    assert limits.hard_time_limit_s - limits.soft_time_limit_s >= 30 - 1e-9
    assert limits.visibility_timeout_s - limits.hard_time_limit_s >= wait + 30 - 1e-9
    timing.check_time_limits(limits)


@pytest.mark.parametrize(
    ("limits", "first_bad"),
    [
        (timing.TimeLimits(30, 20, 40, 50), "http_timeout_s"),
        (timing.TimeLimits(10, 40, 40, 50), "soft_time_limit_s"),
        (timing.TimeLimits(10, 20, 60, 50), "hard_time_limit_s"),
        (timing.TimeLimits(0, 20, 40, 50), "http_timeout_s"),
    ],
)
def test_out_of_order_limits_are_named(limits: timing.TimeLimits, first_bad: str) -> None:
    with pytest.raises(ValueError, match=first_bad):
        timing.check_time_limits(limits)


@pytest.mark.parametrize(
    ("failures", "expected"),
    [(0, 0.0), (2, 0.0), (3, 60.0), (4, 120.0), (5, 240.0), (9, 3600.0), (200, 3600.0)],
)
def test_failure_backoff_grows_after_three_failures_up_to_the_cap(
    failures: int, expected: float
) -> None:
    assert timing.failure_backoff_s(failures, base_s=60, cap_s=3600) == expected


@pytest.mark.parametrize(
    ("failures", "base", "cap", "after"),
    [(-1, 60, 3600, 3), (3, 0, 3600, 3), (3, 60, 0, 3), (3, 60, 3600, 0)],
)
def test_failure_backoff_rejects_bad_input(
    failures: int, base: float, cap: float, after: int
) -> None:
    with pytest.raises(ValueError):
        timing.failure_backoff_s(failures, base_s=base, cap_s=cap, after=after)


@pytest.mark.parametrize(
    ("retry", "delay_s"), [(1, 0.5), (2, 1.0), (3, 2.0), (4, 2.0), (50, 2.0), (10_000, 2.0)]
)
def test_background_redis_retries_double_up_to_two_seconds(retry: int, delay_s: float) -> None:
    assert timing.redis_retry_delay_s(retry) == delay_s


def test_background_redis_retries_are_one_based() -> None:
    with pytest.raises(ValueError):
        timing.redis_retry_delay_s(0)


@pytest.mark.parametrize(("lock_ttl_s", "deadline_s"), [(60.0, 120.0), (0.3, 0.6), (600.0, 1200.0)])
def test_background_redis_retries_last_two_lock_ttls(lock_ttl_s: float, deadline_s: float) -> None:
    assert timing.redis_retry_deadline_s(lock_ttl_s) == deadline_s


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_background_redis_retry_deadline_needs_a_positive_ttl(bad: float) -> None:
    with pytest.raises(ValueError):
        timing.redis_retry_deadline_s(bad)


@pytest.mark.parametrize(("liveness_ttl_s", "interval_s"), [(5.0, 2.5), (0.6, 0.3), (1.0, 0.5)])
def test_the_lost_run_watch_looks_every_half_liveness_ttl(
    liveness_ttl_s: float, interval_s: float
) -> None:
    assert timing.lost_run_watch_interval_s(liveness_ttl_s) == interval_s


@pytest.mark.parametrize("bad", [0.0, -5.0, math.inf, math.nan])
def test_the_lost_run_watch_needs_a_positive_liveness_ttl(bad: float) -> None:
    with pytest.raises(ValueError):
        timing.lost_run_watch_interval_s(bad)
