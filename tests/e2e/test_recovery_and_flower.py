"""A Redis restart healed by the reconciler, and Flower watching the workers, through real
``celery worker`` processes (and a real ``celery flower`` process)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from om_workers.celery.app import enqueue_flush
from om_workers.celery.config import QUEUE, create_celery_app
from om_workers.celery.tasks import RECONCILE_TASK
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis, free_port
from om_workers.coordination.timing import TimeLimits
from om_workers.store import SqlStore
from tests.containers.redis_server import private_redis
from tests.e2e.support import (
    add_chat,
    assert_observed_once,
    covered_sources,
    fully_observed,
    wait_for,
)
from tests.e2e.workers import FINAL, ROOT, StartWorker, runs_of, settled, worker_env

RUNNING_JOB_TIMEOUT_S = 120.0
HEAL_TIMEOUT_S = 300.0
"""How long the restarts' sessions may take to be observed again: what this test checks is
that nothing is lost (how fast it heals is measured by the fault matrix, tests/chaos); on a
loaded machine the failed jobs' backoff alone can pass two minutes."""
"""Only bounds a failing test: nothing asserts how soon a job runs."""


@pytest.fixture
def restartable() -> Iterator[EmbeddedRedis]:
    """A Redis of this test's own: restarting the shared one would disturb other tests."""
    with private_redis() as server:
        yield server


def test_redis_restart_mid_load_loses_no_work(
    restartable: EmbeddedRedis, start_worker: StartWorker, store: SqlStore, tenant: str,
    database_url: str,
) -> None:  # fmt: skip
    client = connect(restartable.url)
    app = create_celery_app(
        broker_url=restartable.url, limits=TimeLimits(60, 70, 80, 90), concurrency=1
    )
    sessions = [f"r{i:02d}" for i in range(12)]
    messages = {}
    for session in sessions:
        store.create_session(tenant, session)
        messages[session] = add_chat(store, tenant, session, 3)
    for _ in range(2):
        start_worker(redis_url=restartable.url, OM_TEST_PROVIDER_DELAY_S="0.3")
    for session in sessions:
        enqueue_flush(store, client, tenant, session, app=app)
    _until_a_job_runs(store, client, app, tenant, database_url, messages, sessions)
    restartable.stop()
    restartable.start()  # same port, empty: markers, locks and queued messages are gone
    # (Reconnecting workers soon re-declare their queue bindings; no flush marker comes back.)
    assert client.keys("om:pending:*") == []

    def healed() -> bool:
        return all(
            settled(database_url, s) and fully_observed(store, tenant, s, messages[s])
            for s in sessions
        )

    # Beat would send om.reconcile every OM_RECONCILE_INTERVAL_S; the test sends it itself,
    # through the restarted broker, so the workers' reconnect is exercised by the same path.
    for _ in range(30):
        app.send_task(RECONCILE_TASK, queue=QUEUE)
        try:
            wait_for(healed, 3, "")
            break
        except AssertionError:
            continue
    wait_for(
        healed,
        5,
        "every session observed after the restart",
        lambda: (
            client.keys("*"),
            {s: [r.state for r in runs_of(database_url, s)] for s in sessions},
            {
                s: sorted(set(messages[s]) - set(covered_sources(store, tenant, s)))
                for s in sessions
            },
        ),
    )
    for session in sessions:
        assert all(r.state in FINAL for r in runs_of(database_url, session))
        assert_observed_once(store, tenant, session, messages[session])
    client.close()


@pytest.mark.timeout(HEAL_TIMEOUT_S + 5 * RUNNING_JOB_TIMEOUT_S)
def test_five_redis_restarts_with_tasks_in_flight_kill_no_worker_and_lose_nothing(
    restartable: EmbeddedRedis, start_worker: StartWorker, store: SqlStore, tenant: str,
    database_url: str,
) -> None:  # fmt: skip
    client = connect(restartable.url)
    app = create_celery_app(
        broker_url=restartable.url, limits=TimeLimits(60, 70, 80, 90), concurrency=1
    )
    workers = [
        start_worker(redis_url=restartable.url, OM_TEST_PROVIDER_DELAY_S="0.5") for _ in range(2)
    ]
    messages: dict[str, list[str]] = {}
    for restart in range(5):
        batch = [f"x{restart}-{i}" for i in range(6)]
        for session in batch:
            store.create_session(tenant, session)
            messages[session] = add_chat(store, tenant, session, 2)
            enqueue_flush(store, client, tenant, session, app=app)
        _until_a_job_runs(store, client, app, tenant, database_url, messages, batch)
        restartable.stop()
        restartable.start()  # empty: the in-flight jobs' locks and messages are gone
    assert [w.process.poll() for w in workers] == [None, None]  # every worker survived

    def healed() -> bool:
        return all(
            settled(database_url, s) and fully_observed(store, tenant, s, m)
            for s, m in messages.items()
        )

    deadline = time.monotonic() + HEAL_TIMEOUT_S
    while time.monotonic() < deadline:
        app.send_task(RECONCILE_TASK, queue=QUEUE)
        try:
            wait_for(healed, 3, "")
            break
        except AssertionError:
            continue
    unhealed = {
        s: [run.state for run in runs_of(database_url, s)]
        for s, m in messages.items()
        if not (settled(database_url, s) and fully_observed(store, tenant, s, m))
    }
    assert not unhealed, f"not observed after five restarts (their jobs' states): {unhealed}"
    for session, ids in messages.items():
        assert_observed_once(store, tenant, session, ids)
    assert [w.process.poll() for w in workers] == [None, None]
    for worker in workers:
        assert "Unrecoverable error" not in worker.log.read_text()
    client.close()


def _until_a_job_runs(
    store: SqlStore, client: redis.Redis, app: Any, tenant: str, database_url: str,
    messages: dict[str, list[str]], sessions: list[str],
) -> None:  # fmt: skip
    """Return once a flush job of ``sessions`` is running. A loaded machine polls slowly enough
    to miss every job's run (queued at one poll, finished at the next): then one session gets
    new messages and a flush, and the poll looks again, so no margin of time decides it."""
    deadline = time.monotonic() + RUNNING_JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        runs = [run for session in sessions for run in runs_of(database_url, session)]
        if any(run.state == "running" for run in runs):
            return
        if runs and all(run.state in FINAL for run in runs):
            session = sessions[0]
            start = len(messages[session]) // 2
            messages[session] += add_chat(store, tenant, session, 2, start=start)
            enqueue_flush(store, client, tenant, session, app=app)
        time.sleep(0.05)
    raise AssertionError(f"no flush job of {sessions} ran in {RUNNING_JOB_TIMEOUT_S} s")


def _get(url: str, auth: str) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {auth}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _answers(url: str, auth: str, check: Any) -> bool:
    try:
        return bool(check(_get(url, auth)))
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return False


def test_flower_lists_the_workers_and_the_flush_tasks(
    app: Any, start_worker: StartWorker, store: SqlStore, client: redis.Redis, tenant: str,
    redis_server: EmbeddedRedis, database_url: str, tmp_path: Path,
) -> None:  # fmt: skip
    start_worker()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    auth = base64.b64encode(b"u:p").decode()
    log = tmp_path / "flower.log"
    args = [
        sys.executable, "-m", "celery", "-A", "om_workers.celery.app", "flower",
        f"--port={port}", "--address=127.0.0.1", "--basic-auth=u:p",
    ]  # fmt: skip
    with log.open("ab") as out:
        flower = subprocess.Popen(
            args,
            cwd=ROOT,
            env=worker_env(redis_server.url, database_url),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        wait_for(
            lambda: _answers(f"{base}/api/workers?refresh=1", auth, lambda w: "w1@" in str(w)),
            30,
            "Flower listing worker w1",
            lambda: log.read_text(errors="replace")[-2000:],
        )
        jobs = []
        for session in ("f1", "f2", "f3"):
            store.create_session(tenant, session)
            if session != "f3":  # f3 has nothing to observe: its flush says why
                add_chat(store, tenant, session, 1)
            jobs.append(enqueue_flush(store, client, tenant, session, app=app).job_id)
        wait_for(
            lambda: all(store.get_job(tenant, job).state == "succeeded" for job in jobs),
            30,
            "the flushes",
        )
        reasons = {job: store.get_job(tenant, job).reason for job in jobs}
        assert reasons[jobs[0]] is None and reasons[jobs[1]] is None  # they recorded memory
        idle = reasons[jobs[2]]
        assert idle is not None and idle.startswith("observer below threshold: 0 of 1 tokens")

        def flush_tasks(tasks: dict[str, Any]) -> bool:
            done = [t for t in tasks.values() if t.get("state") == "SUCCESS"]
            return all(any(job in str(t["args"]) for t in done) for job in jobs)

        wait_for(
            lambda: _answers(f"{base}/api/tasks?taskname=om.flush", auth, flush_tasks),
            20,
            "Flower listing the three om.flush tasks as SUCCESS",
            lambda: _get(f"{base}/api/tasks?taskname=om.flush", auth),
        )
        tasks = _get(f"{base}/api/tasks?taskname=om.flush", auth)
        # The task's result, as Flower shows it: the outcome, and why a flush did nothing.
        results = {
            job: str(t.get("result"))
            for job in jobs
            for t in tasks.values()
            if job in str(t["args"]) and t.get("state") == "SUCCESS"
        }
        assert results[jobs[0]].strip("'\"") == "succeeded", results
        assert f"succeeded: {idle}" in results[jobs[2]], results
        with pytest.raises(urllib.error.HTTPError):
            _get(f"{base}/api/workers", base64.b64encode(b"u:wrong").decode())
    finally:
        flower.terminate()
        try:
            flower.wait(timeout=10)
        except subprocess.TimeoutExpired:
            flower.kill()
            flower.wait(timeout=10)
