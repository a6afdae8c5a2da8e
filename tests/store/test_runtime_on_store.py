"""The in-process runtime runs unchanged on the SQL store, through its fenced session port."""

from __future__ import annotations

import pytest
from store_factories import assistant, message

from om_core import ExtractiveProvider, ObservationalMemoryRuntime, WorkerConfig, fold_ledger
from om_workers.errors import StaleEpochError
from om_workers.store import SqlStore

LOW = {"observation": {"messageTokens": 1}}


def _runtime(handle: object) -> ObservationalMemoryRuntime:
    return ObservationalMemoryRuntime(
        handle,  # type: ignore[arg-type]
        append_entry=handle.append_entry,  # type: ignore[attr-defined]
        settings=LOW,
        observation=WorkerConfig(provider=ExtractiveProvider()),
        session_model="extractive",
    )


def test_flush_on_a_fenced_store_handle_records_memory(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    for i in range(3):
        asked = f"Please deploy build {i} of the billing service to staging today."
        done = f"Build {i} of the billing service is deployed to staging and healthy."
        store.append_entries(
            tenant, session_id, [message(f"u{i}", text=asked), assistant(f"a{i}", text=done)]
        )
    handle = store.session(tenant, session_id, epoch=store.begin_pass(tenant, session_id))
    result = _runtime(handle).flush()
    assert result.error is None and len(result.observation_ids) == 6
    state = store.read_context_state(tenant, session_id)
    assert state.ledger == fold_ledger(store.read_branch(tenant, session_id))
    assert {o.id for o in state.ledger.observations} == set(result.observation_ids)


def test_a_superseded_pass_cannot_write_through_the_runtime(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    asked = "Please deploy build 7 of the billing service to staging today."
    store.append_entries(tenant, session_id, [message("u0", text=asked)])
    stale = store.session(tenant, session_id, epoch=store.begin_pass(tenant, session_id))
    store.begin_pass(tenant, session_id)
    result = _runtime(stale).flush()
    assert result.error is not None and StaleEpochError.__name__ in result.error
    assert fold_ledger(store.read_branch(tenant, session_id)).observations == ()
    with pytest.raises(StaleEpochError):
        stale.append_entry(message("late"))


def test_messages_appended_while_a_flush_runs_stay_on_the_branch(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    """An agent server appends between the worker's read and its memory append: no fork."""
    from om_core.models import SessionEntry

    asked = "Please deploy build 9 of the billing service to staging today."
    store.append_entries(tenant, session_id, [message("u0", text=asked)])
    handle = store.session(tenant, session_id, epoch=store.begin_pass(tenant, session_id))
    late: list[str] = []

    def append_while_the_agent_appends(entry: SessionEntry) -> SessionEntry:
        late.append(f"late{len(late)}")
        store.append_entries(tenant, session_id, [message(late[-1], text="a new question")])
        return handle.append_entry(entry)

    runtime = ObservationalMemoryRuntime(
        handle,
        append_entry=append_while_the_agent_appends,
        settings=LOW,
        observation=WorkerConfig(provider=ExtractiveProvider()),
        session_model="extractive",
    )
    result = runtime.flush()
    assert result.error is None and result.observation_ids
    branch_ids = [e.id for e in store.read_branch(tenant, session_id)]
    assert late and set(late) <= set(branch_ids)
