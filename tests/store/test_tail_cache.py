"""Tails read through the store's tail cache equal tails read afresh: after appends by another
process (a second store on the same database), after the branch forks, and when a longer tail
than the cached one is asked for."""

from __future__ import annotations

from store_factories import message

from om_workers.store import SqlStore


def _ids(entries: tuple[object, ...]) -> list[str]:
    return [e.id for e in entries]  # type: ignore[attr-defined]


def _fresh_tail(store: SqlStore, tenant: str, session_id: str, limit: int) -> list[str]:
    """The tail as a store that never read this session reads it (another process)."""
    return _ids(SqlStore(store.engine).read_tail(tenant, session_id, limit))


def test_a_cached_tail_follows_appends_by_another_process(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, [message(f"m{i}", session_id) for i in range(30)])
    reader = SqlStore(store.engine)
    assert _ids(reader.read_tail(tenant, session_id, 10)) == [f"m{i}" for i in range(20, 30)]
    store.append_entries(tenant, session_id, [message(f"n{i}", session_id) for i in range(4)])
    got = _ids(reader.read_tail(tenant, session_id, 10))
    assert got == _fresh_tail(store, tenant, session_id, 10)
    assert got[-4:] == [f"n{i}" for i in range(4)] and got[0] == "m24"
    # Nothing new: the same answer.
    assert _ids(reader.read_tail(tenant, session_id, 10)) == got
    # Longer than what is cached: read from the store, whole branch at most.
    assert _ids(reader.read_tail(tenant, session_id, 100)) == _ids(
        reader.read_branch(tenant, session_id)
    )


def test_a_cached_tail_is_not_used_for_a_branch_that_forked(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, [message(f"m{i}", session_id) for i in range(12)])
    reader = SqlStore(store.engine)
    assert _ids(reader.read_tail(tenant, session_id, 5))[-1] == "m11"
    # The branch now leaves the cached one at m6: m7..m11 are no longer on it.
    store.append_entries(
        tenant, session_id, [message("f0", session_id, parent_id="m6"), message("f1", session_id)]
    )
    got = _ids(reader.read_tail(tenant, session_id, 5))
    assert got == ["m3", "m4", "m5", "m6", "f0", "f1"][-5:]
    assert got == _fresh_tail(store, tenant, session_id, 5)
    # And a branch that grows on from the fork is followed again.
    store.append_entries(tenant, session_id, [message("f2", session_id)])
    assert _ids(reader.read_tail(tenant, session_id, 3)) == ["f0", "f1", "f2"]
