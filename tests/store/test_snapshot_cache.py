"""The ledger a store serves after its snapshot moved on equals the fold of the whole branch:
the snapshot cache folds a cached ledger of an earlier entry forward when that entry is still on
the branch (scope and memory records appended), and reads the items afresh when it is not (a
fork), whatever another process (a second store on the database) wrote meanwhile."""

from __future__ import annotations

from store_factories import dropped, message, observations, reflections

from om_core import WorkScopeController, fold_ledger
from om_core.scopes.index import fold_work_scope_map
from om_workers.store import SqlMemoryUnitOfWork, SqlStore


def _same_as_the_fold(store: SqlStore, tenant: str, session_id: str) -> None:
    state = store.read_context_state(tenant, session_id)
    branch = store.read_branch(tenant, session_id)
    assert state.ledger == fold_ledger(branch)
    assert state.scope_map == fold_work_scope_map(branch)


def test_a_cached_ledger_is_folded_forward_and_never_served_off_its_branch(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    writer = SqlStore(store.engine)  # another process: this store's cache is not told
    writer.append_entries(tenant, session_id, [message(f"m{i}", session_id) for i in range(6)])
    record, ids = observations("o1", ["m0", "m1"], "m1", session_id)
    writer.append_entries(tenant, session_id, [record])
    _same_as_the_fold(store, tenant, session_id)  # cached: the ledger at o1
    handle = SqlMemoryUnitOfWork(writer, tenant, session_id)
    scopes = WorkScopeController(
        session_id=session_id, append_entry=handle.append_visible, get_view=handle.scope_view
    )
    scopes.open({"id": "task"})
    scopes.enter("task")
    scopes.bind("task", [f"om:{ids[0]}"])
    _same_as_the_fold(store, tenant, session_id)  # folded forward over three scope records
    writer.append_entries(tenant, session_id, [reflections("r1", ids, "o1", session_id)])
    _same_as_the_fold(store, tenant, session_id)
    writer.append_entries(tenant, session_id, [dropped("d1", [ids[1]], session_id)])
    _same_as_the_fold(store, tenant, session_id)
    # A fork at o1: the scope, reflection and drop records leave the branch.
    writer.append_entries(
        tenant,
        session_id,
        [message("f0", session_id, parent_id="o1"), dropped("d2", [ids[0]], session_id)],
    )
    _same_as_the_fold(store, tenant, session_id)
    # Back onto the first branch (its leaf's child): the cached ledger of the fork is off it.
    writer.append_entries(tenant, session_id, [message("back", session_id, parent_id="d1")])
    _same_as_the_fold(store, tenant, session_id)
