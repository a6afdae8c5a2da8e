"""Flush coalescing against a real Redis: bursts, mid-run requests, busy locks, failed publishes."""

from __future__ import annotations

import threading
import uuid

import pytest
import redis

from om_workers.coordination import keys
from om_workers.coordination.coalesce import (
    enqueue,
    pending_flushes,
    release_and_republish,
    stale_pending,
)
from om_workers.coordination.locks import SessionLock


class Queue:
    """A publish target that records what was published (thread-safe)."""

    def __init__(self) -> None:
        self.jobs: list[str] = []
        self._lock = threading.Lock()

    def publish(self, job_id: str) -> None:
        with self._lock:
            self.jobs.append(job_id)


def new_job() -> str:
    return uuid.uuid4().hex


def test_first_request_publishes_and_later_ones_coalesce(client: redis.Redis) -> None:
    queue = Queue()
    first = enqueue(client, "t1", "s1", "job-1", queue.publish)
    second = enqueue(client, "t1", "s1", "job-2", queue.publish)
    other_session = enqueue(client, "t1", "s2", "job-3", queue.publish)
    assert (first.job_id, first.coalesced) == ("job-1", False)
    assert (second.job_id, second.coalesced) == ("job-1", True)
    assert (other_session.job_id, other_session.coalesced) == ("job-3", False)
    assert queue.jobs == ["job-1", "job-3"]
    key = keys.pending_key("t1", "s1")
    assert client.get(key) == "job-1"
    assert 0 < client.ttl(key) <= keys.PENDING_TTL_S


def test_a_burst_from_many_threads_publishes_exactly_once(client: redis.Redis) -> None:
    queue = Queue()
    threads_n = 64
    start = threading.Barrier(threads_n)
    answers: list[tuple[str, bool]] = []
    answers_lock = threading.Lock()

    def ask() -> None:
        start.wait()
        for _ in range(5):
            answer = enqueue(client, "t1", "s1", new_job(), queue.publish)
            with answers_lock:
                answers.append((answer.job_id, answer.coalesced))

    threads = [threading.Thread(target=ask) for _ in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(queue.jobs) == 1
    assert {job for job, _ in answers} == {queue.jobs[0]}
    assert sum(1 for _, coalesced in answers if not coalesced) == 1
    assert len(answers) == threads_n * 5


def test_request_mid_flush_causes_exactly_one_republish(client: redis.Redis) -> None:
    queue = Queue()
    job_1 = enqueue(client, "t1", "s1", "job-1", queue.publish).job_id
    # A worker takes the lock and claims the pending job before reading the session.
    run_1 = SessionLock(client, "t1", "s1")
    assert run_1.acquire(claim_pending=True)
    assert run_1.claimed_job_id == job_1
    # Requests arriving while it runs: the first sets a new marker and publishes, the rest
    # coalesce onto it.
    mid = [enqueue(client, "t1", "s1", new_job(), queue.publish) for _ in range(20)]
    job_2 = mid[0].job_id
    assert not mid[0].coalesced
    assert all(answer.job_id == job_2 and answer.coalesced for answer in mid[1:])
    # That message is delivered while run 1 still holds the lock: busy, dropped, marker kept.
    busy = SessionLock(client, "t1", "s1")
    assert not busy.acquire()
    assert client.get(run_1.pending_key) == job_2
    # Run 1 ends: the release sees the marker and publishes job 2 once more.
    result = release_and_republish(run_1, queue.publish)
    assert result.released
    assert result.pending_job_id == job_2
    assert queue.jobs == [job_1, job_2, job_2]
    # One copy of job 2 runs and claims the marker; the other copy finds nothing and skips.
    run_2 = SessionLock(client, "t1", "s1")
    assert run_2.acquire(claim_pending=True)
    assert run_2.claimed_job_id == job_2
    assert release_and_republish(run_2, queue.publish).pending_job_id is None
    duplicate = SessionLock(client, "t1", "s1")
    assert duplicate.acquire(claim_pending=True)
    assert duplicate.claimed_job_id is None
    release_and_republish(duplicate, queue.publish)
    assert queue.jobs == [job_1, job_2, job_2]


def test_release_without_pending_publishes_nothing(client: redis.Redis) -> None:
    queue = Queue()
    lock = SessionLock(client, "t1", "s1")
    assert lock.acquire(claim_pending=True)
    assert lock.claimed_job_id is None
    result = release_and_republish(lock, queue.publish)
    assert result.released
    assert queue.jobs == []


def test_failed_publish_withdraws_the_marker(client: redis.Redis) -> None:
    def broken(job_id: str) -> None:
        raise ConnectionRefusedError(f"broker down for {job_id}")

    with pytest.raises(ConnectionRefusedError):
        enqueue(client, "t1", "s1", "job-1", broken)
    assert client.get(keys.pending_key("t1", "s1")) is None
    queue = Queue()
    answer = enqueue(client, "t1", "s1", "job-2", queue.publish)
    assert (answer.job_id, answer.coalesced) == ("job-2", False)
    assert queue.jobs == ["job-2"]


def test_failed_republish_keeps_the_marker_for_the_reconciler(client: redis.Redis) -> None:
    enqueue(client, "t1", "s1", "job-1", Queue().publish)
    lock = SessionLock(client, "t1", "s1")
    assert lock.acquire(claim_pending=True)
    enqueue(client, "t1", "s1", "job-2", Queue().publish)

    def broken(job_id: str) -> None:
        raise ConnectionRefusedError(f"broker down for {job_id}")

    with pytest.raises(ConnectionRefusedError):
        release_and_republish(lock, broken)
    assert client.get(lock.key) is None
    assert client.get(lock.pending_key) == "job-2"


def test_a_retried_request_recognises_its_own_marker(client: redis.Redis) -> None:
    # What redis-py's retry does after a lost reply: the same script runs twice.
    script = client.register_script(keys.SET_PENDING)
    key = keys.pending_key("t1", "s1")
    assert script(keys=[key], args=["job-1", 60]) == [1, "job-1"]
    queue = Queue()
    answer = enqueue(client, "t1", "s1", "job-1", queue.publish)
    assert (answer.job_id, answer.coalesced) == ("job-1", False)
    assert queue.jobs == ["job-1"]


def test_reconciler_sees_pending_markers_with_age_and_lock(client: redis.Redis) -> None:
    queue = Queue()
    enqueue(client, "t1", "fresh", "job-fresh", queue.publish)
    enqueue(client, "t:1", "old:%", "job-old", queue.publish)
    enqueue(client, "t1", "old-locked", "job-locked", queue.publish)
    # Age two markers by 100 s (their remaining TTL is what the age is computed from).
    for tenant, session in [("t:1", "old:%"), ("t1", "old-locked")]:
        client.expire(keys.pending_key(tenant, session), keys.PENDING_TTL_S - 100)
    holder = SessionLock(client, "t1", "old-locked")
    assert holder.acquire()
    seen = {(m.tenant_id, m.session_id): m for m in pending_flushes(client, batch=2)}
    assert set(seen) == {("t1", "fresh"), ("t:1", "old:%"), ("t1", "old-locked")}
    assert seen[("t:1", "old:%")].job_id == "job-old"
    assert 99 <= seen[("t:1", "old:%")].age_s <= 101
    assert seen[("t1", "fresh")].age_s < 50
    assert seen[("t1", "old-locked")].locked
    stale = stale_pending(client, min_age_s=60)
    assert [(m.tenant_id, m.session_id, m.job_id) for m in stale] == [("t:1", "old:%", "job-old")]
    holder.release()
