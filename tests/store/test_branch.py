"""Branches: forks, explicit parents, pages after a cursor, the tail, against a naive walk."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.dialects import postgresql
from store_factories import message

from om_core.errors import InvalidEntryError
from om_workers.errors import EntryNotFoundError
from om_workers.store import SqlStore
from om_workers.store.repositories.sessions import _CONTEXT_HEAD_PG


def test_fork_moves_the_leaf_and_the_next_append_branches(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, [message(i) for i in "abcd"])
    info = store.fork(tenant, session_id, "b")
    assert info.leaf_id == "b"
    assert [e.id for e in store.read_branch(tenant, session_id)] == ["a", "b"]
    appended = store.append_entries(tenant, session_id, [message("e"), message("f")])
    assert appended.entries[0].parent_id == "b"
    assert [e.id for e in store.read_branch(tenant, session_id)] == ["a", "b", "e", "f"]
    # Back to the old branch: it is intact.
    store.fork(tenant, session_id, "d")
    assert [e.id for e in store.read_branch(tenant, session_id)] == ["a", "b", "c", "d"]
    with pytest.raises(EntryNotFoundError):
        store.fork(tenant, session_id, "missing")


def test_random_trees_read_like_a_walk_from_the_leaf(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    rng = random.Random(7)
    parents: dict[str, str | None] = {}
    leaf: str | None = None
    for index in range(300):
        entry_id = f"e{index}"
        roll = rng.random()
        if leaf is not None and roll < 0.1:
            leaf = rng.choice(sorted(parents))
            store.fork(tenant, session_id, leaf)
        if leaf is not None and roll > 0.95:
            parent: str | None = rng.choice(sorted(parents))
            store.append_entries(tenant, session_id, message(entry_id, parent_id=parent))
        else:
            parent = leaf
            store.append_entries(tenant, session_id, message(entry_id))
        parents[entry_id] = parent
        leaf = entry_id
        if index % 25 == 0:
            walk: list[str] = []
            cursor: str | None = leaf
            while cursor is not None:
                walk.append(cursor)
                cursor = parents[cursor]
            walk.reverse()
            assert [e.id for e in store.read_branch(tenant, session_id)] == walk


def test_pages_after_a_cursor_cover_the_branch_once(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, [message(f"m{i}") for i in range(10)])
    store.fork(tenant, session_id, "m4")
    store.append_entries(tenant, session_id, [message(f"n{i}") for i in range(5)])
    expected = [e.id for e in store.read_branch(tenant, session_id)]
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = store.read_page(tenant, session_id, after=cursor, limit=3)
        seen.extend(e.id for e in page.entries)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == expected
    assert [e.id for e in store.read_tail(tenant, session_id, 3)] == expected[-3:]
    with pytest.raises(EntryNotFoundError):
        store.read_page(tenant, session_id, after="m7")  # on the other branch
    with pytest.raises(InvalidEntryError):
        store.read_page(tenant, session_id, limit=0)


def test_empty_session_reads_empty(store: SqlStore, tenant: str, session_id: str) -> None:
    assert store.read_branch(tenant, session_id) == ()
    assert store.read_page(tenant, session_id).entries == ()
    state = store.read_context_state(tenant, session_id)
    assert state.entries == () and state.leaf_id is None


def test_branch_of_many_segments_reads_in_order(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    # Each side entry breaks the segment, so the main line ends up as 70 separate seq ranges,
    # more than one read query takes at once.
    mains: list[str] = []
    for index in range(70):
        parent = mains[-1] if mains else None
        store.append_entries(tenant, session_id, message(f"main{index}", parent_id=parent))
        mains.append(f"main{index}")
        store.append_entries(tenant, session_id, message(f"side{index}", parent_id=mains[-1]))
    store.fork(tenant, session_id, mains[-1])
    assert [e.id for e in store.read_branch(tenant, session_id)] == mains
    assert [e.id for e in store.read_tail(tenant, session_id, 40)] == mains[-40:]
    page = store.read_page(tenant, session_id, after="main10", limit=45)
    assert [e.id for e in page.entries] == mains[11:56]
    assert page.next_cursor == "main55"


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


def test_on_postgresql_each_segment_is_looked_up_by_index_whatever_the_statistics(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    if store.engine.dialect.name != "postgresql":
        pytest.skip("a check of PostgreSQL's planner (SQLite's joins are index lookups)")
    with store.engine.begin() as connection:
        connection.exec_driver_sql("ANALYZE entries")  # statistics of an empty store
    for start in range(0, 3000, 500):
        store.append_entries(
            tenant, session_id, [message(f"m{i}") for i in range(start, start + 500)]
        )
    store.fork(tenant, session_id, "m1200")
    store.append_entries(tenant, session_id, [message(f"n{i}") for i in range(100)])
    compiled = _CONTEXT_HEAD_PG.compile(dialect=postgresql.dialect())
    params = {**compiled.params, "tenant_id": tenant, "session_id": session_id}
    with store.engine.connect() as connection:
        plan = connection.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {compiled}", params).scalar_one()
    nodes = list(_plan_nodes(plan[0]["Plan"]))
    whole = [n["Node Type"] for n in nodes if n.get("Relation Name") == "entries"]
    assert set(whole) <= {"Index Scan", "Index Only Scan"}, whole  # never the whole session
    assert [e.id for e in store.read_branch(tenant, session_id)][-2:] == ["n98", "n99"]
