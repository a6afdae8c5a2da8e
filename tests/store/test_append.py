"""Appends: parent defaults, leaf moves, idempotency by id, conflicts, batch atomicity."""

from __future__ import annotations

import pytest
from sqlalchemy import event
from store_factories import message

from om_core.errors import EntryConflictError, InvalidEntryError
from om_core.ledger.models import SessionEntry
from om_workers.errors import SessionNotFoundError
from om_workers.store import AccountStore, SqlStore


def test_single_and_batch_appends_chain_from_the_leaf(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    first = store.append_entries(tenant, session_id, message("a"))
    assert first.appended_ids == ("a",)
    assert first.entries[0].parent_id is None
    assert first.entries[0].created_at is not None
    batch = store.append_entries(tenant, session_id, [message("b"), message("c")])
    assert [e.parent_id for e in batch.entries] == ["a", "b"]
    assert batch.leaf_id == "c"
    info = store.get_session(tenant, session_id)
    assert (info.leaf_id, info.entry_count) == ("c", 3)
    assert [e.id for e in store.read_branch(tenant, session_id)] == ["a", "b", "c"]


def test_same_id_same_content_is_not_stored_twice(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, [message("a"), message("b")])
    again = store.append_entries(tenant, session_id, [message("a"), message("b")])
    assert again.appended_ids == ()
    assert again.duplicate_ids == ("a", "b")
    assert again.leaf_id == "b"
    # The stored form (parent and time filled in by the store) is an exact duplicate too.
    stored = store.read_branch(tenant, session_id)
    assert store.append_entries(tenant, session_id, list(stored)).duplicate_ids == ("a", "b")
    assert store.get_session(tenant, session_id).entry_count == 2


def test_retried_batch_with_one_new_entry_appends_only_that_one(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, [message("a"), message("b")])
    result = store.append_entries(tenant, session_id, [message("b"), message("c")])
    assert result.duplicate_ids == ("b",)
    assert result.appended_ids == ("c",)
    assert result.entries[1].parent_id == "b"
    assert [e.id for e in store.read_branch(tenant, session_id)] == ["a", "b", "c"]


def test_same_id_other_content_is_a_conflict(store: SqlStore, tenant: str, session_id: str) -> None:
    store.append_entries(tenant, session_id, message("a", text="one"))
    with pytest.raises(EntryConflictError) as caught:
        store.append_entries(tenant, session_id, message("a", text="two"))
    assert caught.value.entry_id == "a"
    stored = store.read_branch(tenant, session_id)[0]
    with pytest.raises(EntryConflictError):
        store.append_entries(
            tenant, session_id, stored.model_copy(update={"created_at": "2001-01-01T00:00:00Z"})
        )


def test_entry_ids_are_unique_within_a_tenant_and_private_to_it(
    store: SqlStore, accounts: AccountStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, message("a", text="tenant one"))
    store.create_session(tenant, "s2")
    with pytest.raises(EntryConflictError):
        store.append_entries(tenant, "s2", message("a", "s2"))
    # Another tenant's ids are its own: same id, same session id, other content, no conflict.
    accounts.create_tenant("other")
    store.create_session("other", "s1")
    result = store.append_entries("other", "s1", message("a", text="tenant two"))
    assert result.appended_ids == ("a",)
    assert [e.message.text for e in store.read_branch("other", "s1") if e.message] == ["tenant two"]
    assert [e.message.text for e in store.read_branch(tenant, session_id) if e.message] == [
        "tenant one"
    ]


def test_batch_with_one_bad_entry_writes_nothing(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, message("a", text="one"))
    bad_batches: list[list[SessionEntry]] = [
        [message("b"), message("c"), message("a", text="changed")],
        [message("b"), message("c", "another-session")],
        [message("b"), message("c", parent_id="nowhere")],
        [message("b"), message("b")],
        [message("b"), message("c", parent_id="d"), message("d")],
    ]
    for batch in bad_batches:
        with pytest.raises((EntryConflictError, InvalidEntryError)):
            store.append_entries(tenant, session_id, batch)
    with pytest.raises(InvalidEntryError):
        store.append_entries(tenant, session_id, [])
    info = store.get_session(tenant, session_id)
    assert (info.leaf_id, info.entry_count) == ("a", 1)
    assert [e.id for e in store.read_branch(tenant, session_id)] == ["a"]
    # The failed batches left no trace: their ids are still free.
    assert store.append_entries(tenant, session_id, message("b")).appended_ids == ("b",)


def test_explicit_parent_must_be_in_the_same_session(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.create_session(tenant, "s2")
    store.append_entries(tenant, "s2", message("x", "s2"))
    with pytest.raises(InvalidEntryError):
        store.append_entries(tenant, session_id, message("a", parent_id="x"))


def test_append_to_missing_session(store: SqlStore, tenant: str) -> None:
    with pytest.raises(SessionNotFoundError):
        store.append_entries(tenant, "nope", message("a", "nope"))


def test_a_batch_of_more_than_a_thousand_ids_is_looked_up_in_one_statement(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    batch = [message(f"m{i}") for i in range(1_200)]
    store.append_entries(tenant, session_id, batch)
    lookups: list[str] = []

    def record(_c: object, _cur: object, sql: str, *_: object) -> None:
        if sql.lstrip().startswith("SELECT entries.id, entries.session_pk"):
            lookups.append(sql)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        again = store.append_entries(tenant, session_id, [*batch, message("new")])
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert again.duplicate_ids == tuple(e.id for e in batch)
    assert again.appended_ids == ("new",)
    assert len(lookups) == 1
