"""19. Webhooks: what the outbox adds to a flush job's finish, and one delivery attempt against
a bare POST.

A flush job's finish now also looks up the tenant's listening endpoints and, when there are
some, writes one delivery row per endpoint in the same transaction. Baseline: the same finish
for a tenant without endpoints (one indexed lookup that finds nothing), in the same run, on
SQLite and (when reachable) PostgreSQL. An attempt (claim, sign, POST, record: two write
transactions) is compared with a bare signed httpx POST to the same local receiver.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from om_core.policy.webhooks import secret_from_bytes, signed_headers
from om_workers.jobs.webhooks import WebhookPolicy, attempt_delivery
from om_workers.store import AccountStore, SqlStore, upgrade
from tests.e2e.webhook_receiver import serve_receiver

from .bench_history import postgres_url
from .common import Section

JOBS = 200
ENDPOINTS = 3
ATTEMPTS = 200
SECRET = secret_from_bytes(bytes(range(32)))


def _median_ms(step: Callable[[], object], count: int) -> float:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def _finish(store: SqlStore, tenant: str, session_id: str) -> Callable[[], object]:
    def step() -> object:
        job = store.create_job(tenant, session_id)
        store.start_job(tenant, job.id)
        return store.finish_job(tenant, job.id, "succeeded", counts={"observations": 1})

    return step


def measure(section: Section, backend: str, url: str) -> None:
    upgrade(url)
    store = SqlStore.from_url(url)
    accounts = AccountStore(store.engine)
    try:
        quiet = accounts.create_tenant("quiet").id
        loud = accounts.create_tenant("loud").id
        for n in range(ENDPOINTS):
            hook = f"http://127.0.0.1:9/{n}"
            store.webhooks.add_endpoint(loud, hook, SECRET, ("flush.succeeded",))
        for tenant in (quiet, loud):
            store.create_session(tenant, "s")
        _median_ms(_finish(store, quiet, "s"), 20)  # warm up connections and statements
        without = _median_ms(_finish(store, quiet, "s"), JOBS)
        with_endpoints = _median_ms(_finish(store, loud, "s"), JOBS)
        section.add(
            f"{backend}: create, start, finish a job; tenant with {ENDPOINTS} endpoints",
            with_endpoints, "ms", "same, tenant without endpoints", without,
        )  # fmt: skip
        with serve_receiver(SECRET) as receiver:
            attempt, bare = _attempts(store, loud, receiver.url)
        section.add(
            f"{backend}: one delivery attempt (claim, sign, POST, record)",
            attempt, "ms", "bare signed POST to the same receiver", bare,
        )  # fmt: skip
    finally:
        store.close()


def _attempts(store: SqlStore, tenant: str, url: str) -> tuple[float, float]:
    endpoint = store.webhooks.add_endpoint(tenant, url, SECRET, ("flush.failed",))
    store.create_session(tenant, "a")
    policy = WebhookPolicy(allow_private=True, timeout_s=5)
    for _ in range(ATTEMPTS + 10):
        job = store.create_job(tenant, "a")
        store.finish_job(tenant, job.id, "failed")
    pending = [
        d.id
        for d in store.webhooks.deliveries(tenant, endpoint_id=endpoint.id, limit=ATTEMPTS + 10)
    ]
    body = b'{"data":{},"timestamp":"2026-12-03T16:00:00Z","type":"flush.failed"}'
    with httpx.Client() as http:
        for delivery_id in pending[:10]:  # warm up
            attempt_delivery(store, http, delivery_id, policy)
        queue = iter(pending[10:])
        attempt = _median_ms(lambda: attempt_delivery(store, http, next(queue), policy), ATTEMPTS)
        headers = signed_headers(SECRET, "msg_bare", int(time.time()), body)
        bare = _median_ms(lambda: http.post(url, content=body, headers=headers), ATTEMPTS)
    return attempt, bare


def run() -> Section:
    section = Section("19. Webhooks: the outbox on a flush job's finish, one delivery attempt")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        measure(section, "SQLite", f"sqlite:///{Path(folder) / 'webhooks.db'}")
        with postgres_url() as pg:
            if pg is None:
                section.notes.append("PostgreSQL skipped: nothing answered on 127.0.0.1:5432.")
            else:
                measure(section, "PostgreSQL", pg)
    section.notes.append(
        f"Medians of {JOBS} jobs (create, start and finish: three transactions, as a flush job "
        f"writes them) and of {ATTEMPTS} attempts, each to a receiver on 127.0.0.1 that "
        "verifies the signature with `standardwebhooks` and answers 204. The receiver's "
        "verification is in both the attempt and the bare POST. An attempt is two write "
        "transactions (the claim, the record), so on PostgreSQL it is dominated by two commits. "
        f"Load average (1 min) {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the "
        "end, on 2 shared cores: absolute figures are noisy, the ratios less so."
    )
    return section
