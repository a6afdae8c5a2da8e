"""End to end through real ``celery worker`` processes, a private real Redis and a SQLite file.

No eager mode: the test process publishes ``om.flush`` the way the API does
(:func:`om_workers.celery.app.enqueue_flush`) and workers started with ``python -m celery`` run it.
Waits are bounded polls that fail with a message; no sleep stands in for an assertion.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import redis

from om_workers.celery.app import enqueue_flush
from om_workers.celery.tasks import publisher
from om_workers.jobs.reconcile import LOST_JOB_ERROR
from om_workers.store import SqlStore
from tests.e2e.support import add_chat, assert_observed_once, covered_sources, wait_for
from tests.e2e.workers import FINAL, StartWorker, runs_of, settled


def test_burst_while_a_run_is_in_progress_causes_at_most_two_runs(
    app: Any, start_worker: StartWorker, store: SqlStore, client: redis.Redis, tenant: str,
    database_url: str,
) -> None:  # fmt: skip
    store.create_session(tenant, "burst")
    messages = add_chat(store, tenant, "burst", 10)
    start_worker(OM_TEST_PROVIDER_DELAY_S="1.0")
    first = enqueue_flush(store, client, tenant, "burst", app=app).job_id
    wait_for(lambda: store.get_job(tenant, first).state == "running", 30, "the first run")
    messages += add_chat(store, tenant, "burst", 5, start=10)
    replies = [enqueue_flush(store, client, tenant, "burst", app=app) for _ in range(500)]
    assert store.get_job(tenant, first).state == "running", "the burst outlasted the first run"
    assert len({r.job_id for r in replies}) == 1 and sum(r.coalesced for r in replies) == 499
    wait_for(lambda: settled(database_url, "burst"), 40, "both runs to finish")
    started = [r for r in runs_of(database_url, "burst") if r.attempts > 0]
    assert len(started) <= 2 and all(r.state == "succeeded" for r in started), started
    assert_observed_once(store, tenant, "burst", messages)


def test_two_workers_never_run_one_session_twice_at_once(
    app: Any, start_worker: StartWorker, store: SqlStore, client: redis.Redis, tenant: str,
    database_url: str,
) -> None:  # fmt: skip
    sessions = ["left", "right"]
    messages: dict[str, list[str]] = {s: [] for s in sessions}
    for session in sessions:
        store.create_session(tenant, session)
    workers = [start_worker(OM_TEST_PROVIDER_DELAY_S="0.2") for _ in range(2)]
    publish = publisher(app)
    for rnd in range(3):
        for session in sessions:
            messages[session] += add_chat(store, tenant, session, 4, start=4 * rnd)
            job = enqueue_flush(store, client, tenant, session, app=app).job_id
            for _ in range(3):  # duplicate deliveries of one job race for the session lock
                publish(tenant, session, job)
    for session in sessions:
        wait_for(
            lambda s=session: (
                settled(database_url, s)  # type: ignore[misc]
                and set(messages[s]) <= set(covered_sources(store, tenant, s))
            ),
            45,
            f"session {session} fully observed",
            lambda s=session: (  # type: ignore[misc]
                runs_of(database_url, s),
                sorted(set(messages[s]) - set(covered_sources(store, tenant, s))),
                client.keys("om:*"),
            ),
        )
    for session in sessions:
        started = sorted(
            (r for r in runs_of(database_url, session) if r.started_at is not None),
            key=lambda r: r.started_at or 0,
        )
        assert started and all(r.state == "succeeded" for r in started), started
        for before, after in itertools.pairwise(started):
            assert before.finished_at is not None and after.started_at is not None
            assert before.finished_at <= after.started_at, f"overlapping runs: {before} {after}"
        assert_observed_once(store, tenant, session, messages[session])
    assert store.get_session(tenant, "left").epoch >= 1
    # Every log line after the banner is one JSON object, as in every om process.
    lines = [line for w in workers for line in w.log.read_text().splitlines()]
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert records and all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert not [line for line in lines if line.startswith("[20")]  # no plain-text records


def test_worker_killed_mid_flush_is_completed_after_redelivery(
    app: Any, start_worker: StartWorker, store: SqlStore, client: redis.Redis, tenant: str,
    database_url: str,
) -> None:  # fmt: skip
    store.create_session(tenant, "crash")
    messages = add_chat(store, tenant, "crash", 200)  # 400 messages: four observer chunks
    crash_env = {
        "OM_TEST_PROVIDER_DELAY_S": "0.25",
        "OM_SOFT_TIME_LIMIT_S": "3",
        "OM_HARD_TIME_LIMIT_S": "4",
        "OM_VISIBILITY_TIMEOUT_S": "5",
    }
    victim = start_worker(**crash_env)
    job = enqueue_flush(store, client, tenant, "crash", app=app).job_id
    wait_for(lambda: bool(covered_sources(store, tenant, "crash")), 30, "the first chunk")
    victim.kill()
    partial = covered_sources(store, tenant, "crash")
    assert store.get_job(tenant, job).state == "running"
    assert 0 < len(set(partial)) < len(messages), "the kill did not land mid-run"
    start_worker(**crash_env)
    wait_for(
        lambda: store.get_job(tenant, job).state in FINAL,
        45,
        "the redelivered run to finish",
        lambda: (
            time.time(),
            client.keys("*"),
            client.zrange("unacked_index", 0, -1, withscores=True),
        ),
    )
    run = store.get_job(tenant, job)
    # Whichever comes first finishes the work: the redelivered message (after the visibility
    # timeout) runs the job again, or the lost-run watch fails it once the dead worker's
    # liveness key expired and requests the session again (the redelivery is then skipped).
    if run.state == "failed":
        assert run.error == LOST_JOB_ERROR, run
    else:
        assert run.state == "succeeded" and run.attempts >= 2, run
    wait_for(
        lambda: len(set(covered_sources(store, tenant, "crash"))) == len(messages),
        45,
        "every message observed",
    )
    assert_observed_once(store, tenant, "crash", messages)
