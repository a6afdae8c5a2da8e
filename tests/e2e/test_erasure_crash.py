"""A worker killed with SIGKILL in the middle of an erasure: the job stays unfinished, the
reconciler publishes it again once it made no progress for ``OM_ERASE_RETRY_AFTER_S``,
another worker finishes it, and nothing of the session remains (rows, files, Redis)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import func, select

from om_core.ledger.models import Message, SessionEntry
from om_workers.celery.tasks import erase_publisher
from om_workers.jobs.reconcile import reconcile_once
from om_workers.store import SqlStore
from om_workers.store.schema import entries, erasure_targets
from tests.e2e.erasure_scan import files_holding, redis_holding, tables_holding
from tests.e2e.workers import StartWorker

CANARY = f"canary-{uuid.uuid4().hex}"
ENTRIES = 12_000


def _fill(store: SqlStore, tenant: str, session: str) -> None:
    store.create_session(tenant, session)
    for start in range(0, ENTRIES, 1000):
        batch = [
            SessionEntry(
                id=f"{session}-{i}",
                session_id=session,
                kind="message",
                message=Message(role="user", content=f"line {i} {CANARY if i == 7 else ''}"),
            )
            for i in range(start, start + 1000)
        ]
        store.append_entries(tenant, session, batch)


def _left(store: SqlStore, session_pk: int) -> int:
    with store.engine.connect() as connection:
        query = select(func.count()).select_from(entries).where(entries.c.session_pk == session_pk)
        return int(connection.execute(query).scalar_one())


def _target_pk(store: SqlStore, job_id: str) -> int:
    with store.engine.connect() as connection:
        query = select(erasure_targets.c.session_pk).where(erasure_targets.c.job_id == job_id)
        return int(connection.execute(query).scalar_one())


def _wait(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_killed_erasure_is_finished_by_the_reconciler(
    store: SqlStore,
    client: redis.Redis,
    tenant: str,
    app: Any,
    start_worker: StartWorker,
    database_url: str,
    tmp_path: Path,
) -> None:
    _fill(store, tenant, "doomed")
    store.create_session(tenant, "kept")
    first = start_worker(OM_ERASE_CHUNK_ENTRIES="5")
    job = store.erasure.erase_session(tenant, "doomed", None)
    session_pk = _target_pk(store, job.id)
    publish = erase_publisher(app)
    publish(job.id)
    _wait(lambda: 0 < _left(store, session_pk) < ENTRIES, 60, "the erasure to start deleting")
    first.kill()
    assert store.erasure.get_job(tenant, job.id).state == "running"
    assert _left(store, session_pk) > 0

    start_worker(OM_ERASE_CHUNK_ENTRIES="500")
    time.sleep(0.3)
    report = reconcile_once(
        store,
        client,
        lambda *_: None,
        stale_pending_s=3600,
        stuck_job_s=3600,
        publish_erasure=publish,
        erase_retry_after_s=0.2,
    )
    assert report.erasures == (job.id,)
    _wait(lambda: store.erasure.get_job(tenant, job.id).state == "succeeded", 120, "the job")
    assert _left(store, session_pk) == 0
    assert tables_holding(database_url, CANARY) == []
    assert files_holding(tmp_path, CANARY) == []
    assert redis_holding(client, CANARY) == []
    assert store.get_session(tenant, "kept").id == "kept"
    assert store.erasure.get_job(tenant, job.id).attempts == 2
