"""Flush jobs (states, counts, redacted errors, stuck-job sweep) and tombstones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from om_core.policy.redaction import REDACTED
from om_workers.errors import InvalidJobStateError
from om_workers.store import AccountStore, SqlMemoryUnitOfWork, SqlStore


def test_job_lifecycle_with_redacted_error(store: SqlStore, tenant: str, session_id: str) -> None:
    run = store.create_job(tenant, session_id, force=True)
    assert (run.state, run.force, run.attempts, run.session_id) == ("queued", True, 0, session_id)
    start = store.start_job(tenant, run.id)
    started = start.job
    assert (started.state, started.attempts) == ("running", 1)
    # The same transaction raised the session's epoch and read the session's view.
    assert start.epoch == 1 and store.raise_epoch(tenant, session_id) == 2
    assert (start.view.session_id, start.view.leaf_id) == (session_id, None)
    assert started.started_at is not None
    failed = store.finish_job(
        tenant,
        run.id,
        "failed",
        counts={"observations": 0},
        error="provider said: bad key sk-secret-123",
        secrets=["sk-secret-123"],
    )
    assert failed.state == "failed" and failed.finished_at is not None
    assert failed.error == f"provider said: bad key {REDACTED}"
    assert store.get_job(tenant, run.id) == failed
    with pytest.raises(InvalidJobStateError):
        store.start_job(tenant, run.id)
    with pytest.raises(InvalidJobStateError):
        store.finish_job(tenant, run.id, "succeeded")
    other = store.create_job(tenant, session_id)
    with pytest.raises(InvalidJobStateError):
        store.finish_job(tenant, other.id, "running")
    done = store.finish_job(tenant, other.id, "skipped", counts={"coalesced": 1})
    assert done.counts == {"coalesced": 1}


def test_stuck_jobs_are_swept(store: SqlStore, tenant: str, session_id: str) -> None:
    stuck = store.create_job(tenant, session_id)
    store.start_job(tenant, stuck.id)
    queued = store.create_job(tenant, session_id)
    swept = store.fail_stuck_jobs(datetime.now(UTC) + timedelta(seconds=1))
    assert swept == (stuck.id,)
    assert store.get_job(tenant, stuck.id).state == "failed"
    assert store.get_job(tenant, queued.id).state == "queued"


def test_tombstones_per_tenant_and_scope(
    store: SqlStore, accounts: AccountStore, tenant: str
) -> None:
    assert store.add_tombstones(tenant, "session:s1", ["a", "b", "a"]) == ("a", "b")
    assert store.add_tombstones(tenant, "session:s1", ["b", "c"], corrected=True) == ("c",)
    stones = {t.entry_id: t.corrected for t in store.list_tombstones(tenant, "session:s1")}
    assert stones == {"a": False, "b": True, "c": True}
    # Corrected ids stay withheld; scopes and tenants do not mix.
    assert store.invalidated_ids(tenant, "session:s1") == {"a", "b", "c"}
    assert store.invalidated_ids(tenant, "other-scope") == frozenset()
    accounts.create_tenant("t2")
    assert store.invalidated_ids("t2", "session:s1") == frozenset()
    assert SqlMemoryUnitOfWork(store, tenant, "s1").invalidated_ids("session:s1") == {"a", "b", "c"}
