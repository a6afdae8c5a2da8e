"""The watch for runs of dead workers: a job left ``running`` by a killed worker is failed and
its session requested again at the next look (every half liveness TTL), one look a turn for
the whole cluster, a live worker's run left alone."""

from __future__ import annotations

from datetime import timedelta

import redis
from sqlalchemy import update

from om_workers.coordination import keys, liveness, timing
from om_workers.coordination.locks import SessionLock
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.lost_runs import LostRunWatch
from om_workers.jobs.reconcile import LOST_JOB_ERROR
from om_workers.store import SqlStore
from om_workers.store.schema import flush_jobs
from om_workers.store.unit_of_work import utc_now
from tests.redis.helpers import ManualHeartbeats


def _started_a_minute_ago(store: SqlStore, *job_ids: str) -> None:
    with store.engine.begin() as connection:
        connection.execute(
            update(flush_jobs)
            .where(flush_jobs.c.id.in_(job_ids))
            .values(started_at=utc_now() - timedelta(minutes=1))
        )


def test_a_dead_workers_run_is_failed_and_its_session_requested_at_the_next_look(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    published: list[tuple[str, str, str]] = []
    deps = FlushDeps(store=store, redis=client, publish=lambda t, s, j: published.append((t, s, j)))
    for session in ("dead", "alive"):
        store.create_session(tenant, session)
    dead = store.create_job(tenant, "dead").id
    store.start_job(tenant, dead)  # its worker was killed: no lock, no liveness key
    alive = store.create_job(tenant, "alive").id
    store.start_job(tenant, alive)
    holder = SessionLock(client, tenant, "alive")
    assert holder.acquire()  # a live worker keeps its lock and its liveness key
    _started_a_minute_ago(store, dead, alive)

    beats = ManualHeartbeats()
    watch = LostRunWatch(lambda: deps, beats)
    watch.start()
    assert beats.delays == [timing.lost_run_watch_interval_s(liveness.ttl_s(deps.lock_ttl_s))]
    assert beats.run_due() == 1
    row = store.get_job(tenant, dead)
    assert row.state == "failed" and row.error == LOST_JOB_ERROR
    assert store.get_job(tenant, alive).state == "running"
    ((t, s, job),) = published
    assert (t, s) == (tenant, "dead") and store.get_job(tenant, job).state == "queued"

    # Another process looking in the same turn finds the turn claimed and does nothing.
    assert client.exists(keys.LOST_RUN_WATCH)
    assert LostRunWatch(lambda: deps).look() == ()
    watch.stop()
    assert beats.run_due() == 1 and beats.run_due() == 0  # a stopped watch looks no more
    holder.release()
