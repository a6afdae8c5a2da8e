"""The delegation funnel in the store: links, copies in the original's transaction, the rules.

Runs on SQLite and, with ``OM_TEST_DATABASE_URL``, PostgreSQL (the ``store`` fixture).
"""

from __future__ import annotations

import itertools
import multiprocessing
import signal
import threading

import pytest
from appender import append_and_die_writing_the_copy
from sqlalchemy import delete
from store_factories import assistant, message, observations

from om_core.ledger.funnel import ORIGIN_KEY, FunnelOrigin, funnel_copy_id, funnel_origin
from om_core.ledger.models import SessionEntry
from om_workers.errors import (
    InvalidLinkError,
    LinkConflictError,
    SessionNotFoundError,
    StoreError,
    WorkspaceMissingError,
)
from om_workers.store import AccountStore, SqlStore
from om_workers.store import funnel as store_funnel
from om_workers.store.schema import sessions

WS = "ws"


@pytest.fixture
def linked(store: SqlStore, tenant: str) -> str:
    """A workspace ``ws`` and a child ``c1`` linked to it; returns the child's id."""
    store.create_session(tenant, WS)
    return store.create_session(tenant, "c1", workspace=WS).id


def system(entry_id: str, session_id: str) -> SessionEntry:
    return SessionEntry.model_validate(
        {
            "id": entry_id,
            "sessionId": session_id,
            "kind": "message",
            "message": {"role": "system", "content": "be brief"},
        }
    )


def test_eligible_messages_are_copied_with_new_ids_and_their_origin(
    store: SqlStore, tenant: str, linked: str
) -> None:
    store.append_entries(tenant, WS, message("w0", WS, "parent asks"))
    result = store.append_entries(
        tenant, linked, [message("m1", linked, "read a.py"), assistant("m2", linked, "done")]
    )
    assert result.appended_ids == ("m1", "m2")

    workspace = store.read_branch(tenant, WS)
    ids = [funnel_copy_id(WS, linked, "m1"), funnel_copy_id(WS, linked, "m2")]
    assert [e.id for e in workspace] == ["w0", *ids]
    # On the workspace's branch, after its leaf, in order.
    assert [e.parent_id for e in workspace] == [None, "w0", ids[0]]
    assert all(e.session_id == WS for e in workspace)
    copy = workspace[1]
    assert copy.message is not None and copy.message.text == "read a.py"
    assert funnel_origin(copy) is not None
    assert (funnel_origin(copy).session_id, funnel_origin(copy).entry_id) == (linked, "m1")  # type: ignore[union-attr]
    # The child keeps its own entries, untouched.
    child = store.read_branch(tenant, linked)
    assert [e.id for e in child] == ["m1", "m2"]
    assert all(ORIGIN_KEY not in (e.data or {}) for e in child)
    assert store.get_session(tenant, WS).unobserved_tokens > 0


def test_memory_records_and_system_messages_are_never_copied(
    store: SqlStore, tenant: str, linked: str
) -> None:
    store.append_entries(tenant, linked, [message("m1", linked), system("sys", linked)])
    record, _ = observations("obs1", ["m1"], covers="m1", session_id=linked)
    store.append_memory(tenant, linked, record, epoch=0)
    store.append_entries(
        tenant,
        linked,
        SessionEntry(id="note", session_id=linked, kind="custom", data={"type": "om.note"}),
    )
    copied = [funnel_origin(e) for e in store.read_branch(tenant, WS)]
    assert [o.entry_id for o in copied if o is not None] == ["m1"]
    assert len(copied) == 1
    # The child's memory stays on the child with its own ids.
    assert [e.id for e in store.read_branch(tenant, linked)] == ["m1", "sys", "obs1", "note"]


def test_a_retried_append_copies_nothing_twice(store: SqlStore, tenant: str, linked: str) -> None:
    batch = [message("m1", linked), assistant("m2", linked)]
    store.append_entries(tenant, linked, batch)
    again = store.append_entries(tenant, linked, batch)
    assert again.duplicate_ids == ("m1", "m2")
    assert len(store.read_branch(tenant, WS)) == 2


def test_unlink_stops_copies_and_link_later_copies_only_new_appends(
    store: SqlStore, tenant: str, linked: str
) -> None:
    store.append_entries(tenant, linked, message("m1", linked))
    info = store.unlink_session(tenant, linked)
    assert info.workspace_id is None
    store.append_entries(tenant, linked, message("m2", linked))
    assert store.link_session(tenant, linked, WS).workspace_id == WS
    assert store.get_session(tenant, linked).workspace_id == WS
    store.append_entries(tenant, linked, message("m3", linked))
    origins = [funnel_origin(e) for e in store.read_branch(tenant, WS)]
    assert [o.entry_id for o in origins if o is not None] == ["m1", "m3"]


def test_links_stay_within_the_tenant_and_never_chain(
    store: SqlStore, accounts: AccountStore, tenant: str, linked: str
) -> None:
    other = accounts.create_tenant("globex").id
    store.create_session(other, "theirs")
    # Another tenant's session is reported like a missing one, either way round.
    with pytest.raises(SessionNotFoundError):
        store.link_session(tenant, linked, "theirs")
    with pytest.raises(SessionNotFoundError):
        store.link_session(other, "theirs", WS)
    with pytest.raises(SessionNotFoundError):
        store.create_session(other, "new", workspace=WS)
    with pytest.raises(SessionNotFoundError):
        store.link_session(tenant, linked, "missing")
    with pytest.raises(InvalidLinkError):
        store.link_session(tenant, linked, linked)
    store.create_session(tenant, "solo")
    # The workspace cannot be linked, nor can a session link to a linked one.
    with pytest.raises(LinkConflictError):
        store.link_session(tenant, WS, "solo")
    with pytest.raises(LinkConflictError):
        store.link_session(tenant, "solo", linked)
    with pytest.raises(LinkConflictError):
        store.create_session(tenant, "grandchild", workspace=linked)
    assert store.get_session(tenant, linked).workspace_id == WS
    with pytest.raises(SessionNotFoundError):
        store.get_session(tenant, "grandchild")


def test_a_failing_copy_writes_neither_the_original_nor_the_copy(
    store: SqlStore, tenant: str, linked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.append_entries(tenant, linked, message("m1", linked))
    real = store_funnel.append_locked
    calls = itertools.count()

    def fail_on_the_copy(*args: object, **kwargs: object) -> object:
        # The first call writes the original (inside the transaction); the second, the copy.
        if next(calls) % 2 == 1:
            raise StoreError("injected: the database failed while writing the copy")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store_funnel, "append_locked", fail_on_the_copy)
    with pytest.raises(StoreError, match="injected"):
        store.append_entries(tenant, linked, [message("m2", linked), assistant("m3", linked)])
    monkeypatch.undo()
    assert [e.id for e in store.read_branch(tenant, linked)] == ["m1"]
    assert len(store.read_branch(tenant, WS)) == 1
    assert store.get_session(tenant, linked).entry_count == 1


def test_a_vanished_workspace_refuses_the_append(store: SqlStore, tenant: str, linked: str) -> None:
    with store.engine.begin() as connection:
        connection.execute(delete(sessions).where(sessions.c.id == WS))
    with pytest.raises(WorkspaceMissingError):
        store.append_entries(tenant, linked, message("m1", linked))
    assert store.read_branch(tenant, linked) == ()
    # Messages that are never copied still append; unlinking restores plain appends.
    store.append_entries(tenant, linked, system("sys", linked))
    store.unlink_session(tenant, linked)
    assert store.append_entries(tenant, linked, message("m1", linked)).appended_ids == ("m1",)


def test_concurrent_children_leave_one_unforked_workspace_branch(
    store: SqlStore, tenant: str
) -> None:
    store.create_session(tenant, WS)
    children = [store.create_session(tenant, f"c{n}", workspace=WS).id for n in range(4)]
    per_child = 15
    start = threading.Barrier(len(children))
    errors: list[BaseException] = []

    def work(child: str) -> None:
        try:
            start.wait()
            for index in range(per_child):
                store.append_entries(tenant, child, message(f"{child}-{index}", child))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(c,)) for c in children]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []

    branch = store.read_branch(tenant, WS)
    assert len(branch) == len(children) * per_child
    assert branch[0].parent_id is None
    assert all(b.parent_id == a.id for a, b in itertools.pairwise(branch))
    info = store.get_session(tenant, WS)
    assert (info.entry_count, info.leaf_id) == (len(branch), branch[-1].id)
    origins = [funnel_origin(e) for e in branch]
    assert sorted((o.session_id, o.entry_id) for o in origins if o is not None) == sorted(
        (c, f"{c}-{i}") for c in children for i in range(per_child)
    )
    for child in children:
        mine = [int(o.entry_id.split("-")[1]) for o in origins if o and o.session_id == child]
        assert mine == sorted(mine)


def test_a_process_killed_between_original_and_copy_stores_neither(
    store: SqlStore, tenant: str, linked: str, migrated_url: str
) -> None:
    store.append_entries(tenant, linked, message("m1", linked))
    context = multiprocessing.get_context("spawn")
    worker = context.Process(
        target=append_and_die_writing_the_copy, args=(migrated_url, tenant, linked, "m2")
    )
    worker.start()
    worker.join(120)
    assert worker.exitcode == -signal.SIGKILL
    assert [e.id for e in store.read_branch(tenant, linked)] == ["m1"]
    assert [funnel_origin(e) for e in store.read_branch(tenant, WS)] == [
        FunnelOrigin(session_id=linked, entry_id="m1")
    ]
    # The dead process's locks are gone: the next append and its copy go through.
    store.append_entries(tenant, linked, message("m2", linked))
    assert len(store.read_branch(tenant, WS)) == 2
