"""Redis steps retried in the background until Redis answers: a lock release that met an
outage lands once Redis is back, and re-publishes the flush that waited behind it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from om_workers.coordination import keys, timing
from om_workers.coordination.coalesce import release_and_republish
from om_workers.coordination.connection import connect
from om_workers.coordination.deferred import Deferred
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.coordination.locks import SessionLock
from om_workers.errors import RedisUnavailableError
from tests.chaos.proxy import FaultProxy
from tests.redis.helpers import ManualHeartbeats


class Flaky:
    """A step that raises its first ``failures`` calls."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise RedisUnavailableError("Redis is out")


def test_a_step_is_retried_at_the_backoff_pace_until_it_succeeds() -> None:
    beats, now = ManualHeartbeats(), [0.0]
    deferred = Deferred(beats, clock=lambda: now[0])
    step = Flaky(failures=3)
    deferred.retry("a step", step, deadline_s=60)
    assert deferred.waiting == 1
    while beats.run_due():
        now[0] += beats.delays[-1]
    assert step.calls == 4 and deferred.waiting == 0
    assert beats.delays == [timing.redis_retry_delay_s(n) for n in (1, 2, 3, 4)]


def test_a_step_is_given_up_after_its_deadline() -> None:
    beats, now = ManualHeartbeats(), [0.0]
    deferred = Deferred(beats, clock=lambda: now[0])
    step = Flaky(failures=1_000)
    deferred.retry("a step", step, deadline_s=10)
    while beats.run_due():
        now[0] += beats.delays[-1]
    assert deferred.waiting == 0
    assert 10 / timing.redis_retry_delay_s(100) <= step.calls <= 10 / timing.redis_retry_delay_s(1)
    assert now[0] >= 10


@pytest.fixture
def cut_able(redis_server: EmbeddedRedis) -> Iterator[tuple[FaultProxy, redis.Redis]]:
    """A client that reaches the test Redis through a proxy the test can cut."""
    with FaultProxy("127.0.0.1", redis_server.port, name="redis") as proxy:
        through = connect(f"redis://127.0.0.1:{proxy.port}/0", retries=0)
        yield proxy, through
        through.close()


def test_a_release_that_met_an_outage_lands_when_redis_is_back(
    client: redis.Redis, cut_able: tuple[FaultProxy, redis.Redis]
) -> None:
    proxy, through = cut_able
    lock = SessionLock(through, "t1", "s1", ttl_s=60)
    assert lock.acquire(claim_pending=True)
    client.set(keys.pending_key("t1", "s1"), "job-2")  # requested while the job ran
    published: list[str] = []
    proxy.cut()
    with pytest.raises(RedisUnavailableError):
        release_and_republish(lock, published.append)
    beats = ManualHeartbeats()
    deferred = Deferred(beats)
    deferred.retry("releasing", lambda: release_and_republish(lock, published.append), 120)
    beats.run_due()  # Redis still out: retried later
    assert deferred.waiting == 1 and published == []
    assert client.get(lock.key) == lock.token  # the session stays locked meanwhile
    proxy.restore()
    beats.run_due()
    assert deferred.waiting == 0
    assert client.get(lock.key) is None  # free at once, not after the 60 s TTL
    assert published == ["job-2"]  # the flush that waited behind the lock is sent
