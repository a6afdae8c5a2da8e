"""Fair queueing through real workers: a tenant that asks for flushes behind another tenant's
backlog is served at the next free slots, not after the backlog; with fair queueing off (the
broker's first in, first out) it waits for all of it. Orderings, not timings, are checked."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from om_workers.celery.app import enqueue_flush
from om_workers.store import AccountStore, SqlStore
from tests.e2e.support import add_chat, wait_for
from tests.e2e.workers import StartWorker

BACKLOG = 12
SLOTS = 2


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "first-in-first-out"])
def test_a_tenant_behind_a_backlog_waits_for_free_slots_not_for_the_backlog(
    app: Any,
    start_worker: StartWorker,
    store: SqlStore,
    accounts: AccountStore,
    client: redis.Redis,
    fair: bool,
) -> None:
    busy, quiet = accounts.create_tenant("busy").id, accounts.create_tenant("quiet").id
    for tenant, count in ((busy, BACKLOG), (quiet, 2)):
        for n in range(count):
            store.create_session(tenant, f"s{n}")
            add_chat(store, tenant, f"s{n}", 1)
    start_worker(
        OM_TEST_PROVIDER_DELAY_S="0.3",
        OM_WORKER_CONCURRENCY=str(SLOTS),
        OM_FAIR_QUEUEING="true" if fair else "false",
    )
    # The worker's slots count once it has joined the pool.
    wait_for(lambda: client.zcard("om:pool") == (1 if fair else 0), 10, "the pool advertisement")
    busy_jobs = [
        enqueue_flush(store, client, busy, f"s{n}", app=app, fair=fair).job_id
        for n in range(BACKLOG)
    ]
    wait_for(
        lambda: sum(store.get_job(busy, j).state == "running" for j in busy_jobs) == SLOTS,
        30,
        "the busy tenant to fill every slot",
    )
    asked_at = datetime.now(UTC)
    quiet_jobs = [
        enqueue_flush(store, client, quiet, f"s{n}", app=app, fair=fair).job_id for n in range(2)
    ]
    wait_for(
        lambda: all(store.get_job(quiet, j).state == "succeeded" for j in quiet_jobs),
        60,
        "the quiet tenant's flushes",
    )
    first_quiet = min(_started(store, quiet, j) for j in quiet_jobs)
    # Busy jobs that started after the quiet tenant asked and before its first job started:
    # with fair queueing at most the ones already admitted to the broker (one slot's worth,
    # as places free one at a time); first in, first out, every one that waited.
    wait_for(
        lambda: all(store.get_job(busy, j).state == "succeeded" for j in busy_jobs),
        60,
        "the busy tenant's backlog",
    )
    overtaking = [j for j in busy_jobs if asked_at < _started(store, busy, j) < first_quiet]
    if fair:
        assert len(overtaking) <= 1, overtaking
    else:
        assert len(overtaking) >= BACKLOG - SLOTS - 1, overtaking
    assert client.llen("om:backlog") == 0  # every place was freed


def _started(store: SqlStore, tenant: str, job_id: str) -> datetime:
    started = store.get_job(tenant, job_id).started_at
    assert started is not None, job_id
    return started
