"""The flush path's statements on the SQLite driver (``om_workers.store.driver``) read and
write what SQLAlchemy's execution path does, and step aside for anyone listening to it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError, NoResultFound
from store_factories import message

from om_workers.store import SqlStore, driver
from om_workers.store.engine import write_transaction
from om_workers.store.memory_view import WITHHELD
from om_workers.store.repositories import entries, jobs, sessions
from om_workers.store.schema import sessions as sessions_table
from tests.e2e.support import add_chat


def _job(store: SqlStore, tenant: str, session_id: str) -> str:
    add_chat(store, tenant, session_id, 1)
    return store.create_job(tenant, session_id, force=True, full_reflection_rebuild=False).id


def test_rows_hold_the_values_sqlalchemy_returns(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    job_id = _job(store, tenant, session_id)
    now = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    with write_transaction(store.engine) as connection:
        # SQLite takes the driver's path; PostgreSQL SQLAlchemy's, with the same answers.
        sqlite = store.engine.dialect.name == "sqlite"
        assert (driver._prepared(connection, jobs._START) is not None) == sqlite
        params = {"job": job_id, "tenant": tenant, "now": now}
        ours = driver.first(connection, jobs._START, params)
        theirs = connection.execute(jobs._START, params).first()
        assert ours is not None and theirs is not None
        # Started twice: only the attempts differ.
        assert ours._mapping == {**theirs._mapping, "attempts": theirs.attempts - 1}
        assert (ours.started_at, ours.counts, ours.force) == (theirs.started_at, {}, True)
        lock = {"tenant_id": tenant, "session_id": session_id}
        assert tuple(driver.one(connection, sessions._LOCK, lock)) == tuple(
            connection.execute(sessions._LOCK, lock).one()
        )
        nothing = {"tenant_id": tenant, "scope": "nowhere"}
        assert driver.rows(connection, WITHHELD, nothing) == []
        assert driver.first(connection, WITHHELD, nothing) is None
        with pytest.raises(NoResultFound):
            driver.one(connection, WITHHELD, nothing)


def test_writes_count_the_rows_they_changed(store: SqlStore, tenant: str, session_id: str) -> None:
    add_chat(store, tenant, session_id, 1)
    info = store.get_session(tenant, session_id)
    with write_transaction(store.engine) as connection:
        pk = connection.execute(
            sessions_table.select().where(sessions_table.c.id == session_id)
        ).one()
        params = {
            "session": pk.pk,
            "new_leaf": info.leaf_id,
            "new_count": info.entry_count,
            "now": datetime.now(UTC),
            "new_tokens": 7,
        }
        assert driver.write(connection, sessions._MOVE_LEAF, params) == 1
        assert driver.write(connection, sessions._MOVE_LEAF, {**params, "session": -1}) == 0
    assert store.get_session(tenant, session_id).unobserved_tokens == 7


def test_a_driver_error_is_the_error_sqlalchemy_raises(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    add_chat(store, tenant, session_id, 1)
    if store.engine.dialect.name != "sqlite":
        pytest.skip("the driver path is SQLite's")
    with write_transaction(store.engine) as connection:
        pk = connection.execute(
            sessions_table.select().where(sessions_table.c.id == session_id)
        ).one()
        params = {"session": pk.pk, "new_leaf": "x", "new_count": 1, "now": datetime.now(UTC)}
        with pytest.raises(IntegrityError):
            # NOT NULL on the unobserved tokens.
            driver.write(connection, sessions._MOVE_LEAF, {**params, "new_tokens": None})


def test_a_statement_listener_sees_every_statement(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    job_id = _job(store, tenant, session_id)
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(args[2])

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        with write_transaction(store.engine) as connection:
            params = {"job": job_id, "tenant": tenant, "now": datetime.now(UTC)}
            assert driver.first(connection, jobs._START, params) is not None
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert len(seen) == 1 and seen[0].startswith("UPDATE flush_jobs")


def test_many_rows_go_in_statements_of_a_bounded_size(
    store: SqlStore, tenant: str, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver, "_MAX_ROWS", 2)
    batch = [message(f"m{i}", session_id, f"text {i}") for i in range(5)]
    assert store.append_entries(tenant, session_id, batch).appended_ids == tuple(
        f"m{i}" for i in range(5)
    )
    stored = store.read_branch(tenant, session_id)
    assert [(e.id, e.parent_id) for e in stored] == [
        (f"m{i}", None if i == 0 else f"m{i - 1}") for i in range(5)
    ]


def test_in_lists_find_what_sqlalchemy_finds(store: SqlStore, tenant: str, session_id: str) -> None:
    add_chat(store, tenant, session_id, 2)
    ids = [e.id for e in store.read_branch(tenant, session_id)]
    with write_transaction(store.engine) as connection:
        pk = connection.execute(
            sessions_table.select().where(sessions_table.c.id == session_id)
        ).one()
        for wanted, refs in ((ids[:1], ids[1:]), (ids, []), ([], ids[2:]), (["nowhere"], ids)):
            params = {"tenant_id": tenant, "ids": wanted, "session_pk": pk.pk, "refs": refs}
            ours = sorted(tuple(row) for row in driver.rows(connection, entries._LOOKUP, params))
            theirs = sorted(tuple(row) for row in connection.execute(entries._LOOKUP, params))
            assert ours == theirs and len(ours) == len(set(wanted) & set(ids) | set(refs))


def test_outside_a_transaction_sqlalchemy_begins_one_first(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    with store.engine.connect() as connection:
        assert driver._prepared(connection, WITHHELD) is None
        assert driver.rows(connection, WITHHELD, {"tenant_id": tenant, "scope": "x"}) == []
        assert connection.in_transaction()  # SQLAlchemy's autobegin
