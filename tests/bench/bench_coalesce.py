"""6. Coalescing: enqueue latency (p50/p99) and flush jobs caused, for 1,000 requests on one
session and for one request on each of 1,000 sessions, against a bare Celery publish."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from om_workers.celery.config import create_celery_app
from om_workers.celery.limits import time_limits
from om_workers.celery.tasks import publisher
from om_workers.config import Settings
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.coordination.fairness import FairPublisher, FairQueue
from om_workers.jobs.requests import request_flush
from om_workers.store import AccountStore, SqlStore, upgrade

from .common import Section, percentile

REQUESTS = 1_000


def _timed(call: object, count: int) -> list[float]:
    samples = []
    for i in range(count):
        start = time.perf_counter()
        call(i)  # type: ignore[operator]
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def run() -> Section:
    section = Section("6. Coalescing: enqueue latency and flush jobs caused (SQLite store, Redis)")
    with tempfile.TemporaryDirectory() as folder, EmbeddedRedis() as redis_server:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        upgrade(url)
        store = SqlStore.from_url(url)
        tenant = AccountStore(store.engine).create_tenant("bench").id
        client = connect(redis_server.url)
        app = create_celery_app(
            broker_url=redis_server.url, limits=time_limits(Settings()), concurrency=1
        )
        send = publisher(app)
        published: list[str] = []

        def record(tenant_id: str, session_id: str, job_id: str) -> None:
            published.append(job_id)
            send(tenant_id, session_id, job_id)

        # The API's path: through the fair queue (with room for every job: no worker runs
        # here to free places), then the broker.
        publish = FairPublisher(FairQueue(client, capacity=REQUESTS * 2), record)

        bare = _timed(lambda i: send(tenant, f"bare{i}", f"job{i}"), REQUESTS)

        store.create_session(tenant, "one")
        one = _timed(
            lambda i: request_flush(store, client, tenant, "one", publish=publish), REQUESTS
        )
        jobs_one = len(published)

        for i in range(REQUESTS):
            store.create_session(tenant, f"many{i}")
        published.clear()
        many = _timed(
            lambda i: request_flush(store, client, tenant, f"many{i}", publish=publish),
            REQUESTS,
        )
        jobs_many = len(published)
        store.close()
        client.close()

    for label, samples in (("1 session", one), ("1,000 sessions", many)):
        for share, tag in ((0.5, "p50"), (0.99, "p99")):
            section.add(
                f"enqueue {tag}, {label}",
                percentile(samples, share),
                "ms",
                f"bare publish {tag}",
                percentile(bare, share),
            )
    section.add(
        "flush jobs caused, 1,000 requests on 1 session", jobs_one, "jobs", "requests", REQUESTS
    )
    section.add(
        "flush jobs caused, 1 request on each of 1,000 sessions",
        jobs_many,
        "jobs",
        "requests",
        REQUESTS,
    )
    section.notes.append(
        "Sequential requests from one thread, no worker consuming; bare publish = "
        "`send_task('om.flush')` to the same broker. A coalesced request is one Redis GET (and a "
        "read of the pending job's row); a new one writes a job row, sets the pending marker, "
        "adds the job to the fair queue and publishes it."
    )
    return section
