"""Fenced memory writes: a flush raises the epoch; a stale epoch writes nothing."""

from __future__ import annotations

import pytest
from store_factories import message, observations

from om_workers.errors import SessionNotFoundError, StaleEpochError
from om_workers.store import SqlMemoryUnitOfWork, SqlStore
from om_workers.store.records import FlushJob, JobFinish


def test_raise_epoch_raises_the_epoch(store: SqlStore, tenant: str, session_id: str) -> None:
    assert store.get_session(tenant, session_id).epoch == 0
    assert store.raise_epoch(tenant, session_id) == 1
    assert store.raise_epoch(tenant, session_id) == 2
    assert store.get_session(tenant, session_id).epoch == 2
    with pytest.raises(SessionNotFoundError):
        store.raise_epoch(tenant, "missing")


def test_memory_write_with_a_stale_epoch_is_rejected_and_writes_nothing(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, [message("a"), message("b")])
    old = store.raise_epoch(tenant, session_id)
    first, _ = observations("obs-1", ["a"], "a")
    assert store.append_memory(tenant, session_id, first, old).appended_ids == ("obs-1",)

    newer = store.raise_epoch(tenant, session_id)
    late, _ = observations("obs-late", ["b"], "b")
    with pytest.raises(StaleEpochError) as caught:
        store.append_memory(tenant, session_id, [message("c"), late], old)
    assert (caught.value.epoch, caught.value.current) == (old, newer)
    branch = [e.id for e in store.read_branch(tenant, session_id)]
    assert branch == ["a", "b", "obs-1"]
    assert store.read_context_state(tenant, session_id).ledger.observation_covers_up_to_id == "a"

    # The worker holding the newer epoch still writes.
    assert store.append_memory(tenant, session_id, late, newer).appended_ids == ("obs-late",)


def test_fenced_handle_stops_writing_after_a_newer_flush(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, message("a"))
    handle = SqlMemoryUnitOfWork(
        store, tenant, session_id, epoch=store.raise_epoch(tenant, session_id)
    )
    record, _ = observations("obs-1", ["a"], "a")
    assert handle.append_entry(record).parent_id == "a"
    store.raise_epoch(tenant, session_id)
    again, _ = observations("obs-2", ["a"], "a")
    with pytest.raises(StaleEpochError):
        handle.append_entry(again)
    assert [e.id for e in handle.entries()] == ["a", "obs-1"]


def test_a_held_batch_commits_with_the_job_finish(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, [message("a"), message("b")])
    job = store.create_job(tenant, session_id)
    started = store.start_job(tenant, job.id)
    handle = SqlMemoryUnitOfWork(store, tenant, session_id, epoch=started.epoch, hold_last=True)
    first, _ = observations("obs-1", ["a"], "a")
    assert handle.append([first]) == "obs-1"
    # Held: not on the branch until the next write.
    assert [e.id for e in store.read_branch(tenant, session_id)] == ["a", "b"]
    second, _ = observations("obs-2", ["b"], "b")
    handle.append([second])  # writes the first batch, holds the second
    assert [e.id for e in store.read_branch(tenant, session_id)] == ["a", "b", "obs-1"]
    finished = handle.finish(JobFinish(job.id, "succeeded", {"observations": 2}))
    assert finished is not None and finished.state == "succeeded"
    assert [e.id for e in store.read_branch(tenant, session_id)] == ["a", "b", "obs-1", "obs-2"]
    assert store.get_job(tenant, job.id).counts == {"observations": 2}


def _holding_job(
    store: SqlStore, tenant: str, session_id: str
) -> tuple[FlushJob, SqlMemoryUnitOfWork]:
    """A started job over a one-message session and its unit of work holding its last batch."""
    store.append_entries(tenant, session_id, message("a"))
    job = store.create_job(tenant, session_id)
    started = store.start_job(tenant, job.id)
    return job, SqlMemoryUnitOfWork(store, tenant, session_id, epoch=started.epoch, hold_last=True)


def test_a_stale_held_batch_writes_nothing_and_finishes_nothing(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    job, handle = _holding_job(store, tenant, session_id)
    record, _ = observations("obs-1", ["a"], "a")
    handle.append([record])
    store.raise_epoch(tenant, session_id)  # a newer flush took the session over
    with pytest.raises(StaleEpochError):
        handle.finish(JobFinish(job.id, "succeeded"))
    assert isinstance(handle.fenced, StaleEpochError)
    assert [e.id for e in store.read_branch(tenant, session_id)] == ["a"]
    assert store.get_job(tenant, job.id).state == "running"


def test_finishing_a_swept_job_keeps_its_state_and_the_records(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    job, handle = _holding_job(store, tenant, session_id)
    record, _ = observations("obs-1", ["a"], "a")
    handle.append([record])
    store.finish_job(tenant, job.id, "failed", error="swept")
    assert handle.finish(JobFinish(job.id, "succeeded")) is None
    assert store.get_job(tenant, job.id).state == "failed"
    assert [e.id for e in store.read_branch(tenant, session_id)] == ["a", "obs-1"]
