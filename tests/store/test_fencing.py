"""Fenced memory writes: a pass raises the epoch; a stale epoch writes nothing."""

from __future__ import annotations

import pytest
from store_factories import message, observations

from om_workers.errors import SessionNotFoundError, StaleEpochError
from om_workers.store import SqlStore


def test_begin_pass_raises_the_epoch(store: SqlStore, tenant: str, session_id: str) -> None:
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


def test_fenced_handle_stops_writing_after_a_newer_pass(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, message("a"))
    handle = store.session(tenant, session_id, epoch=store.raise_epoch(tenant, session_id))
    record, _ = observations("obs-1", ["a"], "a")
    assert handle.append_entry(record).parent_id == "a"
    store.raise_epoch(tenant, session_id)
    again, _ = observations("obs-2", ["a"], "a")
    with pytest.raises(StaleEpochError):
        handle.append_entry(again)
    assert [e.id for e in handle.entries()] == ["a", "obs-1"]
