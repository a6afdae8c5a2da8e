"""10. One tenant cannot starve another: tenant A requests flushes of 2,000 sessions at once,
tenant B of 10 sessions a second later, on a fixed pool (one ``celery worker``, 16 threads) with
a provider that takes 200 ms a call. Figure: B's p99 time from request to finished flush, with
fair queueing (the default) and with it off (the broker's first in, first out); baseline: B
alone on the same pool.
"""

from __future__ import annotations

import math
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from om_workers.celery.app import enqueue_flush
from om_workers.celery.config import create_celery_app
from om_workers.coordination import keys
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import AccountStore, SqlStore, upgrade
from tests.e2e.support import add_chat
from tests.e2e.workers import Worker

from .bench_workers import LIMITS, bench_worker_env
from .common import Section

BUSY_SESSIONS = 2_000
SESSIONS = 10
SLOTS = 16
DELAY_S = 0.2
WAIT_S = 900


def p99(values: list[float]) -> float:
    """Nearest-rank 99th percentile (of 10 values: the largest)."""
    ranked = sorted(values)
    return ranked[max(0, math.ceil(0.99 * len(ranked)) - 1)]


def b_latencies(tmp: Path, *, busy: int, fair: bool) -> tuple[list[float], float]:
    """B's seconds from request to finished flush, one per session, and how long A's
    requests took to be accepted; ``busy`` sessions of tenant A are requested first."""
    url = f"sqlite:///{tmp / f'fair-{busy}-{fair}.db'}"
    upgrade(url)
    store = SqlStore.from_url(url)
    accounts = AccountStore(store.engine)
    tenant_a = accounts.create_tenant("a").id
    tenant_b = accounts.create_tenant("b").id
    for tenant, count in ((tenant_a, busy), (tenant_b, SESSIONS)):
        for n in range(count):
            store.create_session(tenant, f"s{n:04d}")
            add_chat(store, tenant, f"s{n:04d}", 1)
    with EmbeddedRedis() as redis_server, ExitStack() as stack:
        client = connect(redis_server.url)
        stack.callback(client.close)
        app = create_celery_app(broker_url=redis_server.url, limits=LIMITS, concurrency=1)
        env = bench_worker_env(redis_server.url, url, delay_s=DELAY_S, slots=SLOTS, fair=fair)
        worker = Worker(f"fair{busy}{fair:d}", env, tmp / f"fair-{busy}-{fair}.log")
        stack.callback(worker.stop)
        worker.wait_ready()
        while fair and not client.zcard(keys.POOL):  # its slots are the fair queue's capacity
            time.sleep(0.05)
        started = time.perf_counter()
        for n in range(busy):
            enqueue_flush(store, client, tenant_a, f"s{n:04d}", app=app, fair=fair)
        accepted_s = time.perf_counter() - started
        if busy:
            time.sleep(1.0)
        jobs = [
            enqueue_flush(store, client, tenant_b, f"s{n:04d}", app=app, fair=fair).job_id
            for n in range(SESSIONS)
        ]
        latencies = _wait_for(store, tenant_b, jobs)
    store.close()
    return latencies, accepted_s


def _wait_for(store: SqlStore, tenant: str, jobs: list[str]) -> list[float]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        rows = [store.get_job(tenant, job) for job in jobs]
        if any(row.state == "failed" for row in rows):
            raise RuntimeError(f"a flush of tenant B failed: {rows}")
        if all(row.finished_at is not None for row in rows):
            return [
                (row.finished_at - row.queued_at).total_seconds()
                for row in rows
                if row.finished_at is not None
            ]
        time.sleep(0.05)
    raise RuntimeError(f"tenant B's flushes did not finish in {WAIT_S} s")


def run() -> Section:
    section = Section("10. Fair queueing: one tenant's backlog against another's flushes")
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        alone, _ = b_latencies(tmp, busy=0, fair=True)
        fair, accepted_fair = b_latencies(tmp, busy=BUSY_SESSIONS, fair=True)
        fifo, accepted_fifo = b_latencies(tmp, busy=BUSY_SESSIONS, fair=False)
    for name, latencies in (("fair queueing", fair), ("first in, first out", fifo)):
        section.add(
            f"B's p99 request to finished flush, behind A's {BUSY_SESSIONS:,}, {name}",
            p99(latencies),
            "s",
            "B alone, same pool",
            p99(alone),
        )
    section.notes.append(
        f"One `celery worker` (threads pool, {SLOTS} slots), private Redis broker, SQLite store; "
        f"each flush observes one two-message session with the extractive provider delayed "
        f"{DELAY_S * 1000:.0f} ms a call (2 calls a flush). Tenant A's {BUSY_SESSIONS:,} "
        f"requests were accepted in {accepted_fair:.1f} s (fair) and {accepted_fifo:.1f} s "
        f"(first in, first out) from one thread; B's {SESSIONS} came 1 s after A's last. "
        "Latency is the job row's finish minus its request time; p99 is nearest-rank. "
        f"B alone: median {sorted(alone)[len(alone) // 2]:.2f} s; behind A with fair "
        f"queueing: median {sorted(fair)[len(fair) // 2]:.2f} s."
    )
    return section
