"""Context without re-folding: snapshot + later entries equals a fold of the whole branch."""

from __future__ import annotations

import random

from store_factories import assistant, dropped, message, observations, reflections

from om_core.ledger.fold import eligible_observation_sources, fold_ledger, unscanned_entries
from om_core.ledger.models import CompactionEntry, FoldedMemory, SessionEntry
from om_core.ledger.tokens import estimate_entry_tokens
from om_core.scopes.controller import WorkScopeController
from om_core.scopes.index import fold_work_scope_map
from om_workers.store import SqlMemoryUnitOfWork, SqlStore


def _check(store: SqlStore, tenant: str, session_id: str) -> None:
    branch = store.read_branch(tenant, session_id)
    state = store.read_context_state(tenant, session_id)
    full = fold_ledger(branch)
    assert state.ledger.to_json_dict() == full.to_json_dict()
    assert state.scope_map == fold_work_scope_map(branch)
    # The entries handed back are exactly the branch after the snapshot point.
    ids = [e.id for e in branch]
    start = ids.index(state.snapshot_entry_id) + 1 if state.snapshot_entry_id else 0
    assert [e.id for e in state.entries] == ids[start:]
    unobserved = sum(
        estimate_entry_tokens(e)
        for e in eligible_observation_sources(unscanned_entries(list(branch), full))
    )
    assert store.get_session(tenant, session_id).unobserved_tokens == unobserved


def test_snapshot_follows_memory_appends(store: SqlStore, tenant: str, session_id: str) -> None:
    store.append_entries(tenant, session_id, [message("u1"), assistant("a1")])
    _check(store, tenant, session_id)
    record, obs_ids = observations("o1", ["u1", "a1"], "a1")
    store.append_entries(tenant, session_id, record)
    _check(store, tenant, session_id)
    state = store.read_context_state(tenant, session_id)
    assert state.snapshot_entry_id == "o1" and state.entries == ()

    store.append_entries(tenant, session_id, [message("u2"), assistant("a2")])
    state = store.read_context_state(tenant, session_id)
    assert [e.id for e in state.entries] == ["u2", "a2"]  # not the whole history
    _check(store, tenant, session_id)

    store.append_entries(tenant, session_id, reflections("r1", obs_ids, "o1"))
    store.append_entries(tenant, session_id, dropped("d1", obs_ids[:1]))
    _check(store, tenant, session_id)
    ledger = store.read_context_state(tenant, session_id).ledger
    assert len(ledger.reflections) == 1 and ledger.dropped_observation_ids == (obs_ids[0],)


def test_compaction_snapshot_restarts_the_fold(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, [message("u1"), message("u2")])
    record, _ = observations("o1", ["u1"], "u1")
    store.append_entries(tenant, session_id, record)
    memory = FoldedMemory(full_fold=True, pending_reflection_observation_ids=())
    data = CompactionEntry(through_entry_id="u2", keep_entry_ids=(), memory=memory)
    compaction = SessionEntry(
        id="c1",
        session_id=session_id,
        kind="compaction",
        summary="summary",
        data=data.to_json_dict(),
    )
    store.append_entries(tenant, session_id, compaction)
    _check(store, tenant, session_id)
    assert store.read_context_state(tenant, session_id).ledger.observations == ()


def test_forks_and_explicit_parents_keep_context_equal_to_a_full_fold(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    rng = random.Random(11)
    ids: list[str] = []
    messages: list[str] = []
    for step in range(60):
        roll = rng.random()
        if ids and roll < 0.08:
            store.fork(tenant, session_id, rng.choice(ids))
        elif ids and roll < 0.12:
            entry = message(f"x{step}", parent_id=rng.choice(ids))
            store.append_entries(tenant, session_id, entry)
            ids.append(entry.id)
            messages.append(entry.id)
        elif messages and roll < 0.35:
            branch_messages = [
                e.id for e in store.read_branch(tenant, session_id) if e.kind == "message"
            ]
            if not branch_messages:
                continue
            sources = rng.sample(branch_messages, k=min(2, len(branch_messages)))
            record, _ = observations(f"o{step}", sources, branch_messages[-1])
            store.append_entries(tenant, session_id, record)
            ids.append(record.id)
        else:
            entry = message(f"m{step}", text="t" * rng.randint(1, 80))
            store.append_entries(tenant, session_id, entry)
            ids.append(entry.id)
            messages.append(entry.id)
        _check(store, tenant, session_id)


def test_handle_context_state_matches(store: SqlStore, tenant: str, session_id: str) -> None:
    handle = SqlMemoryUnitOfWork(store, tenant, session_id)
    handle.append_entry(message("u1"))
    record, _ = observations("o1", ["u1"], "u1")
    handle.append_entry(record)
    assert handle.context_state().ledger == fold_ledger(handle.entries())


def test_the_scope_map_comes_with_the_snapshot_across_scopes_and_forks(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    handle = SqlMemoryUnitOfWork(store, tenant, session_id)
    store.append_entries(tenant, session_id, [message("u1"), assistant("a1")])
    record, obs_ids = observations("o1", ["u1", "a1"], "a1")
    store.append_entries(tenant, session_id, record)
    scopes = WorkScopeController(
        session_id=session_id, append_entry=handle.append_entry, get_entries=handle.entries
    )
    scopes.open({"id": "plan"})
    scopes.open({"id": "task-a", "parentId": "plan"})
    scopes.bind("task-a", [f"om:{obs_ids[0]}"])
    fork_point = store.get_session(tenant, session_id).leaf_id
    scopes.enter("task-a")
    store.append_entries(tenant, session_id, [message("u2")])
    _check(store, tenant, session_id)
    state = store.read_context_state(tenant, session_id)
    assert state.scope_map.leaf == "task-a" and [e.id for e in state.entries] == ["u2"]

    assert fork_point is not None
    store.fork(tenant, session_id, fork_point)  # back before the enter
    _check(store, tenant, session_id)
    assert store.read_context_state(tenant, session_id).scope_map.leaf == "session"


def test_a_snapshot_row_without_a_scope_map_is_refolded(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    from om_workers.store.schema import snapshots

    handle = SqlMemoryUnitOfWork(store, tenant, session_id)
    store.append_entries(tenant, session_id, [message("u1")])
    scopes = WorkScopeController(
        session_id=session_id, append_entry=handle.append_entry, get_entries=handle.entries
    )
    scopes.open({"id": "plan"})
    scopes.enter("plan")
    # Rows written before migration 0002 carry no map.
    with store.engine.begin() as connection:
        connection.execute(snapshots.update().values(scope_map=None))
    assert store.read_context_state(tenant, session_id).scope_map.leaf == "plan"
    store.append_entries(tenant, session_id, [message("u2")])
    _check(store, tenant, session_id)


def test_a_cached_snapshot_is_never_served_after_another_process_wrote_memory(
    store: SqlStore, tenant: str, session_id: str, migrated_url: str
) -> None:
    other = SqlStore.from_url(migrated_url)  # another API or worker process
    try:
        store.append_entries(tenant, session_id, [message("u1"), message("u2")])
        record, _ = observations("o1", ["u1"], "u1")
        store.append_entries(tenant, session_id, record)
        _check(store, tenant, session_id)  # now cached in `store`
        record, _ = observations("o2", ["u2"], "u2")
        other.append_entries(tenant, session_id, record)
        _check(store, tenant, session_id)
        assert len(store.read_context_state(tenant, session_id).ledger.observations) == 2
    finally:
        other.close()
