"""The rate-limit Lua script against a real Redis: it agrees with the pure GCRA function on a
table of cases, writes nothing when it refuses, expires its keys and keeps buckets apart."""

from __future__ import annotations

import pytest
import redis

from om_core.policy.rate_limit import RateLimit, decide
from om_workers.coordination import keys
from om_workers.coordination.rate_limit import RateLimiter

NOW = 1_700_000_000_000_000

# (stored TAT offset from NOW or None, interval µs, burst), as in tests/core/test_rate_limit.py
CASES: list[tuple[int | None, int, int]] = [
    (None, 100_000, 3),
    (-5_000_000, 100_000, 3),
    (100_000, 100_000, 3),
    (200_000, 100_000, 3),
    (300_000, 100_000, 3),
    (150_000, 100_000, 3),
    (250_000, 100_000, 3),
    (270_001, 100_000, 1),
    (None, 1_000_000, 1),
    (1, 1_000_000, 1),
    (None, 1_500, 1),
    (None, 50_000, 1),
    (10_000_000_000, 333_333, 40),
]


@pytest.mark.parametrize("wanted", [1, 4])
@pytest.mark.parametrize(("offset", "interval", "burst"), CASES)
def test_script_agrees_with_the_pure_function(
    client: redis.Redis, offset: int | None, interval: int, burst: int, wanted: int
) -> None:
    key = keys.rate_key("k1", "reads")
    stored = None if offset is None else NOW + offset
    if stored is not None:
        client.set(key, str(stored))
    # One transaction: Redis freezes its clock for the whole of it, so a TTL of 2 ms cannot run
    # out between the script and the reads that check what it wrote.
    pipe = client.pipeline(transaction=True)
    pipe.eval(keys.RATE_LIMIT, 2, key, keys.THROTTLED, interval, burst, NOW, "", wanted)
    pipe.get(key)
    pipe.pttl(key)
    reply, after, pttl = pipe.execute()
    expected = decide(stored, NOW, interval, burst, wanted)
    got = [int(part) for part in reply]
    assert got == [
        int(expected.allowed),
        expected.retry_after_us,
        expected.tat_us if expected.tat_us is not None else -1,
        expected.ttl_ms,
        expected.granted,
    ]
    if expected.allowed:
        assert after is not None and int(after) == expected.tat_us
        assert 0 < pttl <= expected.ttl_ms
    else:
        assert after == (None if stored is None else str(stored))


def test_limiter_spends_the_burst_on_redis_time_and_keeps_buckets_apart(
    client: redis.Redis,
) -> None:
    limiter = RateLimiter(client)
    limit = RateLimit(rate_per_s=0.1, burst=3)  # no refill during the test
    verdicts = [limiter.acquire("k1", "appends", limit).allowed for _ in range(4)]
    assert verdicts == [True, True, True, False]
    refused = limiter.acquire("k1", "appends", limit)
    assert not refused.allowed and 0 < refused.retry_after_us <= limit.interval_us
    # Another class of the same key and another key have their own buckets.
    assert limiter.acquire("k1", "reads", limit).allowed
    assert limiter.acquire("k2", "appends", limit).allowed
    assert 0 < client.pttl(keys.rate_key("k1", "appends")) <= 3 * limit.interval_us // 1000


def test_rate_key_escapes_its_parts() -> None:
    assert keys.rate_key("a:b", "reads") == "om:rate:a%3Ab:reads"
    with pytest.raises(ValueError):
        keys.rate_key("", "reads")


def test_refusals_are_counted_per_tenant_and_allowed_requests_are_not(
    client: redis.Redis,
) -> None:
    limiter = RateLimiter(client)
    limit = RateLimit(rate_per_s=0.001, burst=2)
    outcomes = [
        limiter.acquire("k1", "flushes", limit, tenant_id="t1", now_us=NOW).allowed
        for _ in range(5)
    ]
    limiter.acquire("k2", "flushes", limit, tenant_id="t2", now_us=NOW)
    assert outcomes == [True, True, False, False, False]
    assert client.hgetall(keys.THROTTLED) == {"t1": "3"}
