"""A flush job's place in the fair queue rides on its session lock's round trips
(``run_flush_job(place=...)`` on a private real Redis and a SQLite store): marked running with
the acquire, freed with the release once the job ended, kept when the job could not start (its
message may be retried) or met a busy lock (the task frees it)."""

from __future__ import annotations

import redis

from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.provider import ProviderRequest, ProviderResponse
from om_core.policy.fairness import QueuedJob, TenantLoad
from om_workers.coordination.fairness import FairPublisher, FairQueue
from om_workers.coordination.locks import SessionLock
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.flush import run_flush_job
from om_workers.jobs.requests import request_flush
from om_workers.store import SqlStore
from tests.e2e.support import LOW, add_chat

Sent = list[tuple[str, str, str]]


def _publisher(client: redis.Redis, sent: Sent) -> FairPublisher:
    # One place: the second session's job waits for the first one's.
    return FairPublisher(FairQueue(client, capacity=1), lambda t, s, j: sent.append((t, s, j)))


def _two_jobs(store: SqlStore, client: redis.Redis, tenant: str, fair: FairPublisher) -> list[str]:
    jobs = []
    for session in ("s1", "s2"):
        store.create_session(tenant, session)
        add_chat(store, tenant, session, 2)
        jobs.append(request_flush(store, client, tenant, session, publish=fair).job_id)
    return jobs


def test_the_place_is_marked_running_and_freed_with_the_lock(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    sent: Sent = []
    fair = _publisher(client, sent)
    first, second = _two_jobs(store, client, tenant, fair)
    loads: list[tuple[int, list[TenantLoad]]] = []

    class Watching(ExtractiveProvider):
        def generate(self, request: ProviderRequest) -> ProviderResponse:
            loads.append(fair.queue.load())
            return super().generate(request)

    deps = FlushDeps(
        store=store, redis=client, publish=fair, provider=Watching, memory_settings=LOW
    )
    place = fair.place(first, "worker-1")
    outcome = run_flush_job(deps, tenant, "s1", first, place=place)
    assert outcome.outcome == "succeeded"
    assert loads[0] == (2, [TenantLoad(tenant, waiting=1, running=1)])
    assert place.freed and place.admitted == [QueuedJob(tenant, "s2", second)]
    assert fair.queue.load() == (1, [TenantLoad(tenant, queued=1)])
    assert sent == [(tenant, "s1", first)]  # admitted, not yet published
    place.send_admitted()
    assert sent[-1] == (tenant, "s2", second) and place.admitted == []


def test_a_busy_lock_leaves_the_place_running_for_the_task_to_free(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    fair = _publisher(client, [])
    first, _ = _two_jobs(store, client, tenant, fair)
    deps = FlushDeps(store=store, redis=client, publish=fair, memory_settings=LOW)
    holder = SessionLock(client, tenant, "s1")
    assert holder.acquire()
    place = fair.place(first, "worker-1")
    assert run_flush_job(deps, tenant, "s1", first, place=place).outcome == "busy"
    assert not place.freed
    assert fair.queue.load() == (2, [TenantLoad(tenant, waiting=1, running=1)])
    holder.release()


def test_a_job_that_could_not_start_keeps_its_place_for_the_retry(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    fair = _publisher(client, [])
    first, _ = _two_jobs(store, client, tenant, fair)
    down = SqlStore.from_url("postgresql+psycopg://postgres@127.0.0.1:1/none")
    deps = FlushDeps(store=down, redis=client, publish=fair, memory_settings=LOW)
    place = fair.place(first, "worker-1")
    try:
        assert run_flush_job(deps, tenant, "s1", first, place=place).outcome == "unavailable"
    finally:
        down.close()
    assert not place.freed
    assert fair.queue.load() == (2, [TenantLoad(tenant, waiting=1, running=1)])
    lock = SessionLock(client, tenant, "s1")
    assert lock.acquire()  # the lock itself was released
    lock.release()
