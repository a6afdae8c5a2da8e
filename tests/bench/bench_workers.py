"""Flush throughput through one real ``celery worker`` (threads pool) against the ideal.

Run: ``.venv/bin/python -m tests.bench.bench_workers`` (not part of ``make bench``: it starts
processes and a private Redis). Each flush observes one two-message session with the extractive
provider, delayed by ``OM_TEST_PROVIDER_DELAY_S``; the store is a SQLite file. The ideal is
``flushes x provider calls per flush x latency / concurrency``: a worker that spent no time of
its own, only waiting on the provider in ``concurrency`` parallel slots.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from om_core.extractive import ExtractiveProvider
from om_core.provider import ProviderRequest, ProviderResponse
from om_core.runtime import ObservationalMemoryRuntime, WorkerConfig
from om_workers.celery_app import create_celery_app
from om_workers.embedded_redis import EmbeddedRedis
from om_workers.redis_client import connect
from om_workers.store import SqlStore, upgrade
from om_workers.tasks import enqueue_flush
from om_workers.timing import TimeLimits
from tests.e2e.support import LOW, add_chat
from tests.e2e.workers import Worker, worker_env

CONCURRENCY = 16


def calls_per_flush() -> int:
    """Provider calls one flush of a one-turn session makes (counted in process)."""
    calls = 0

    class Counting(ExtractiveProvider):
        def generate(self, request: ProviderRequest) -> ProviderResponse:
            nonlocal calls
            calls += 1
            return super().generate(request)

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'count.db'}"
        upgrade(url)
        store = SqlStore.from_url(url)
        tenant = store.create_tenant("bench").id
        store.create_session(tenant, "c")
        add_chat(store, tenant, "c", 1)
        entries = list(store.read_branch(tenant, "c"))

        class Session:
            id = "c"

            def get_entries(self) -> list[object]:
                return entries  # type: ignore[return-value]

        ObservationalMemoryRuntime(
            Session(),  # type: ignore[arg-type]
            append_entry=entries.append,
            settings=LOW,
            observation=WorkerConfig(provider=Counting()),
            session_model="extractive",
        ).flush()
        store.close()
    return calls


def measure(flushes: int, delay_s: float, tmp: Path) -> float:
    """Seconds from the first enqueue until ``flushes`` runs of distinct sessions finished."""
    url = f"sqlite:///{tmp / f'bench-{delay_s}.db'}"
    upgrade(url)
    store = SqlStore.from_url(url)
    tenant = store.create_tenant("bench").id
    sessions = [f"b{i:04d}" for i in range(flushes)]
    for session in sessions:
        store.create_session(tenant, session)
        add_chat(store, tenant, session, 1)
    with EmbeddedRedis() as redis_server:
        client = connect(redis_server.url)
        app = create_celery_app(
            broker_url=redis_server.url, limits=TimeLimits(60, 70, 80, 90), concurrency=1
        )
        env = worker_env(
            redis_server.url,
            url,
            OM_TEST_PROVIDER_DELAY_S=str(delay_s),
            OM_WORKER_CONCURRENCY=str(CONCURRENCY),
            OM_SETTINGS_JSON=json.dumps(LOW),
            # The e2e tests' 2 s TTL is too tight for a loaded 2-core machine (a starved
            # heartbeat loses the lock and the run is fenced out); use a production-like one.
            OM_LOCK_TTL_S="20",
        )
        worker = Worker("bench", env, tmp / f"bench-{delay_s}.log")
        try:
            worker.wait_ready()
            engine = create_engine(url)
            started = time.perf_counter()
            for session in sessions:
                enqueue_flush(store, client, tenant, session, app=app)
            query = text("SELECT count(*) FROM flush_runs WHERE state IN ('succeeded', 'failed')")
            failed = text("SELECT count(*) FROM flush_runs WHERE state = 'failed'")
            while True:
                with engine.connect() as connection:
                    done = connection.execute(query).scalar_one()
                if done >= flushes:
                    with engine.connect() as connection:
                        lost = connection.execute(failed).scalar_one()
                    if lost:
                        raise RuntimeError(f"{lost} of {flushes} flushes failed")
                    break
                if time.perf_counter() - started > 600:
                    raise RuntimeError(f"only {done} of {flushes} flushes finished in 600 s")
                time.sleep(0.05)
            elapsed = time.perf_counter() - started
            engine.dispose()
        finally:
            worker.stop()
            client.close()
            store.close()
    return elapsed


def main() -> None:
    calls = calls_per_flush()
    print(f"provider calls per flush: {calls}; worker: threads pool, concurrency {CONCURRENCY}")
    print("| provider latency | flushes | seconds | flushes/s | ideal flushes/s | share of ideal |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for delay_s, flushes in ((0.0, 300), (0.2, 320)):
            elapsed = measure(flushes, delay_s, Path(tmp))
            rate = flushes / elapsed
            ideal = CONCURRENCY / (calls * delay_s) if delay_s else float("inf")
            share = f"{rate / ideal:.0%}" if delay_s else "n/a"
            ideal_text = f"{ideal:.1f}" if delay_s else "unbounded"
            print(
                f"| {delay_s * 1000:.0f} ms | {flushes} | {elapsed:.2f} | {rate:.1f} | "
                f"{ideal_text} | {share} |"
            )


if __name__ == "__main__":
    main()
