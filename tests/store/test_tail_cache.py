"""Tails read through the store's tail cache equal tails read afresh: after appends by another
process (a second store on the same database), after the branch forks, and when a longer tail
than the cached one is asked for; and after this process's own appends, which extend the
cached tail without a read."""

from __future__ import annotations

import pytest
from sqlalchemy import delete
from store_factories import message

from om_workers.errors import WorkspaceMissingError
from om_workers.store import SqlStore
from om_workers.store.schema import sessions
from tests.store.test_flush_cost import Statement, recorded


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


def _payload_reads(statements: list[Statement]) -> list[str]:
    return [s.sql for s in statements if "payload" in s.sql and "FROM entries" in s.sql]


def test_an_append_extends_the_cached_tail_so_the_next_read_reads_no_entries(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, [message(f"m{i}", session_id) for i in range(30)])
    store.read_tail(tenant, session_id, 10)
    store.append_entries(tenant, session_id, [message(f"n{i}", session_id) for i in range(4)])
    with recorded(store) as seen:
        got = store.read_tail(tenant, session_id, 10)
    assert _payload_reads(seen) == []
    assert [e.model_dump() for e in got] == [
        e.model_dump() for e in SqlStore(store.engine).read_tail(tenant, session_id, 10)
    ]
    assert _ids(got) == [f"m{i}" for i in range(24, 30)] + [f"n{i}" for i in range(4)]


def test_an_append_that_does_not_continue_the_cached_tail_leaves_it_to_the_read(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, [message(f"m{i}", session_id) for i in range(8)])
    store.read_tail(tenant, session_id, 5)
    # Another process moves the leaf on: this process's tail no longer ends at the leaf.
    SqlStore(store.engine).append_entries(tenant, session_id, [message("o0", session_id)])
    store.append_entries(tenant, session_id, [message("p0", session_id)])
    with recorded(store) as seen:
        assert _ids(store.read_tail(tenant, session_id, 4)) == ["m6", "m7", "o0", "p0"]
    assert _payload_reads(seen) != []
    # A batch forking inside itself: the branch holds its second entry, not its first.
    store.append_entries(
        tenant,
        session_id,
        [message("f0", session_id, parent_id="p0"), message("f1", session_id, parent_id="p0")],
    )
    assert _ids(store.read_tail(tenant, session_id, 3)) == ["o0", "p0", "f1"]
    assert _fresh_tail(store, tenant, session_id, 3) == ["o0", "p0", "f1"]


def test_a_failed_append_leaves_the_cached_tail_as_it_was(store: SqlStore, tenant: str) -> None:
    store.create_session(tenant, "ws")
    child = store.create_session(tenant, "c1", workspace="ws").id
    store.append_entries(tenant, child, [message(f"m{i}", child) for i in range(4)])
    store.read_tail(tenant, child, 10)
    # The child's rows are written, then the copy finds no workspace: all of it rolls back.
    with store.engine.begin() as connection:
        connection.execute(delete(sessions).where(sessions.c.id == "ws"))
    with pytest.raises(WorkspaceMissingError):
        store.append_entries(tenant, child, [message("x0", child)])
    # Another process appends at the same place (the same seq): the read shows its entry,
    # never the one rolled back.
    store.unlink_session(tenant, child)
    SqlStore(store.engine).append_entries(tenant, child, [message("y0", child)])
    assert _ids(store.read_tail(tenant, child, 10)) == ["m0", "m1", "m2", "m3", "y0"]
