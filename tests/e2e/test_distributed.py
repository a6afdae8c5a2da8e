"""The distributed flush through real ``celery worker`` processes, a private real Redis and a
SQLite store: same memory as in-process, exclusivity at scale, fencing after a lost lock,
provider failures over HTTP, and the worker's Prometheus metrics.

Waits are bounded polls that fail naming what they waited for.
"""

from __future__ import annotations

import itertools
import json
import urllib.request
from collections import defaultdict
from typing import Any

import redis
from sqlalchemy import create_engine, text

from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.runtime import ObservationalMemoryRuntime, WorkerConfig
from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import ObservationalMemoryLedger, SessionEntry
from om_workers.celery.app import enqueue_flush
from om_workers.coordination.embedded import free_port
from om_workers.store import SqlStore
from tests.e2e import llm_server
from tests.e2e.providers import THIEF_TENANT_ENV
from tests.e2e.support import add_chat, assert_observed_once, covered_sources, wait_for
from tests.e2e.workers import FINAL, RunRow, StartWorker, as_datetime

REFLECTING: dict[str, Any] = {
    "observation": {"messageTokens": 1},
    "reflection": {"observationTokens": 120},
    "context": {"observationsPoolMaxTokens": 1_000_000},
}
"""Observe every message and reflect often, so the comparison covers both workers."""
SECRET = "sk-e2e-0123456789abcdef"


def metrics_of(port: int) -> dict[str, float]:
    """The worker's ``/metrics`` as ``{"name{labels}": value}``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body = response.read().decode()
    samples = (line.rsplit(" ", 1) for line in body.splitlines() if not line.startswith("#"))
    return {name: float(value) for name, value in samples}


def all_runs(database_url: str) -> dict[str, list[RunRow]]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT s.id, r.id, r.state, r.attempts, r.started_at, r.finished_at, "
                    "r.error FROM flush_jobs r JOIN sessions s ON s.pk = r.session_pk"
                )
            ).all()
    finally:
        engine.dispose()
    by_session: dict[str, list[RunRow]] = defaultdict(list)
    for row in rows:
        run = RunRow(row[1], row[2], int(row[3]), as_datetime(row[4]), as_datetime(row[5]), row[6])
        by_session[row[0]].append(run)
    return by_session


def shape(ledger: ObservationalMemoryLedger) -> dict[str, Any]:
    """The ledger with memory ids replaced by record positions (ids are random per run)."""
    position = {o.id: i for i, o in enumerate(ledger.observations)}
    return {
        "observations": [(o.text, o.source_entry_ids, o.relevance) for o in ledger.observations],
        "reflections": [
            (r.text, [position[i] for i in r.observation_ids]) for r in ledger.reflections
        ],
        "dropped": sorted(position[i] for i in ledger.dropped_observation_ids),
        "covers": ledger.observation_covers_up_to_id,
    }


def test_worker_flush_equals_in_process_runtime_and_exports_metrics(
    app: Any, start_worker: StartWorker, store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    store.create_session(tenant, "same")
    add_chat(store, tenant, "same", 30)
    entries = list(store.read_branch(tenant, "same"))
    port = free_port()
    start_worker(OM_SETTINGS_JSON=json.dumps(REFLECTING), OM_WORKER_METRICS_PORT=str(port))
    job = enqueue_flush(store, client, tenant, "same", app=app).job_id
    wait_for(lambda: store.get_job(tenant, job).state in FINAL, 30, "the worker's run")
    assert store.get_job(tenant, job).state == "succeeded", store.get_job(tenant, job)

    local: list[SessionEntry] = list(entries)

    class Session:
        id = "same"

        def get_entries(self) -> list[SessionEntry]:
            return local

    runtime = ObservationalMemoryRuntime(
        Session(),
        append_entry=local.append,
        settings=REFLECTING,
        observation=WorkerConfig(provider=ExtractiveProvider()),
        session_model="extractive",
    )
    assert runtime.flush().error is None
    worker_ledger = fold_ledger(store.read_branch(tenant, "same"))
    local_ledger = fold_ledger(local)
    assert worker_ledger.reflections, "the settings were meant to make the reflector run"
    assert shape(worker_ledger) == shape(local_ledger)

    samples = metrics_of(port)
    assert samples['om_worker_flush_jobs_total{outcome="succeeded"}'] == 1
    assert samples['om_worker_flush_duration_seconds_count{outcome="succeeded"}'] == 1
    assert samples["om_worker_fence_rejections_total"] == 0


def test_three_workers_fifty_sessions_never_overlap_and_finish(
    app: Any, start_worker: StartWorker, store: SqlStore, client: redis.Redis, tenant: str,
    database_url: str,
) -> None:  # fmt: skip
    sessions = [f"x{i:02d}" for i in range(50)]
    messages: dict[str, list[str]] = {}
    for session in sessions:
        store.create_session(tenant, session)
        messages[session] = add_chat(store, tenant, session, 2)
    for _ in range(3):
        # 12 slots on 2 cores: a 2 s lock TTL could starve a heartbeat and fence a run out.
        start_worker(OM_TEST_PROVIDER_DELAY_S="0.02", OM_LOCK_TTL_S="6")
    for rnd in range(2):
        for session in sessions:
            if rnd:
                messages[session] += add_chat(store, tenant, session, 1, start=2)
            enqueue_flush(store, client, tenant, session, app=app)

    def done() -> bool:
        runs = all_runs(database_url)
        return all(
            runs[s] and all(r.state in FINAL for r in runs[s])
            and set(messages[s]) <= set(covered_sources(store, tenant, s))
            for s in sessions
        )  # fmt: skip

    wait_for(done, 60, "all 50 sessions settled and fully observed", lambda: client.keys("om:*"))
    runs = all_runs(database_url)
    for session in sessions:
        started = sorted(
            (r for r in runs[session] if r.started_at is not None),
            key=lambda r: r.started_at or 0,
        )
        assert started and all(r.state == "succeeded" for r in started), started
        for before, after in itertools.pairwise(started):
            assert before.finished_at is not None and after.started_at is not None
            assert before.finished_at <= after.started_at, f"overlapping runs: {before} {after}"
        assert_observed_once(store, tenant, session, messages[session])


def test_worker_whose_lock_was_taken_over_cannot_write(
    app: Any, start_worker: StartWorker, store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    store.create_session(tenant, "stolen")
    add_chat(store, tenant, "stolen", 3)
    epoch = store.get_session(tenant, "stolen").epoch
    port = free_port()
    start_worker(
        OM_PROVIDER="tests.e2e.providers:thief",
        OM_WORKER_METRICS_PORT=str(port),
        **{THIEF_TENANT_ENV: tenant},
    )
    job = enqueue_flush(store, client, tenant, "stolen", app=app).job_id
    wait_for(lambda: store.get_job(tenant, job).state in FINAL, 30, "the fenced run to finish")
    run = store.get_job(tenant, job)
    assert run.state == "failed" and run.error is not None, run
    assert "fenced out before writing" in run.error, run.error
    # The epoch moved twice: this run's pass, then the thief's (the new holder's) pass.
    assert store.get_session(tenant, "stolen").epoch == epoch + 2
    assert {e.kind for e in store.read_branch(tenant, "stolen")} == {"message"}
    # The job's row is finished a moment before the worker counts its outcome.
    failed = 'om_worker_flush_jobs_total{outcome="failed"}'
    wait_for(lambda: metrics_of(port)[failed] == 1, 10, "the failed job to be counted")
    samples = metrics_of(port)
    fenced = samples["om_worker_fence_rejections_total"] + samples["om_worker_lock_lost_total"]
    assert fenced >= 1 and samples[failed] == 1, samples


def test_provider_failures_over_http_fail_runs_redacted_and_the_worker_goes_on(
    app: Any, start_worker: StartWorker, store: SqlStore, client: redis.Redis, tenant: str,
    database_url: str,
) -> None:  # fmt: skip
    faulty = [f"s-{fault}" for fault in llm_server.FAULTS]
    with llm_server.running() as server:
        worker = start_worker(
            OM_PROVIDER="openai",
            OM_PROVIDER_BASE_URL=server.url,
            OM_PROVIDER_API_KEY=SECRET,
            OM_MODEL="gpt-wire",
            OM_HTTP_TIMEOUT_S="0.5",
            OM_PROVIDER_MAX_ATTEMPTS="3",
            OM_BACKOFF_BASE_S="0.05",
            OM_BACKOFF_CAP_S="0.2",
        )
        jobs = {}
        for session in faulty:
            store.create_session(tenant, session)
            add_chat(store, tenant, session, 2)
            jobs[session] = enqueue_flush(store, client, tenant, session, app=app).job_id
        for session, job in jobs.items():
            wait_for(lambda j=job: store.get_job(tenant, j).state in FINAL, 30, f"{session}")  # type: ignore[misc]
            run = store.get_job(tenant, job)
            assert run.state == "failed" and run.error, (session, run)
            assert SECRET not in run.error, run.error
            assert {e.kind for e in store.read_branch(tenant, session)} == {"message"}, session
            retried = server.calls_for(session)
            assert retried >= (1 if "malformed" in session else 3), (session, retried)
        assert "[REDACTED" in store.get_job(tenant, jobs["s-ratelimit"]).error  # type: ignore[operator]

        store.create_session(tenant, "s-healthy")
        messages = add_chat(store, tenant, "s-healthy", 2)
        job = enqueue_flush(store, client, tenant, "s-healthy", app=app).job_id
        wait_for(lambda: store.get_job(tenant, job).state in FINAL, 30, "the healthy session")
        assert store.get_job(tenant, job).state == "succeeded", store.get_job(tenant, job)
        assert_observed_once(store, tenant, "s-healthy", messages)
        assert server.models["gpt-wire"] > 0 and worker.process.poll() is None
        assert SECRET not in worker.log.read_text(errors="replace")
