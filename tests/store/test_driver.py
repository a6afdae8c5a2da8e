"""Statements on the driver's cursor (SQLite's and psycopg's) read and write what SQLAlchemy
would, show themselves to statement listeners, and fail as SQLAlchemy fails."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    Table,
    and_,
    bindparam,
    event,
    literal_column,
    or_,
    select,
)
from sqlalchemy.exc import DBAPIError, IntegrityError

from om_workers.store import SqlStore
from om_workers.store import driver as store_driver
from om_workers.store.driver import FastStatement
from om_workers.store.repositories import entries as entry_rows
from om_workers.store.schema import entries, sessions, tombstones
from tests.store.store_factories import message

_SESSION = select(sessions).where(
    sessions.c.tenant_id == bindparam("tenant_id"), sessions.c.id == bindparam("session_id")
)
_ADD_TOMBSTONE = FastStatement(tombstones.insert())
_EXPANDED_LOOKUP = select(
    entries.c.id, entries.c.session_pk, entries.c.seq, entries.c.segment_start, entries.c.payload
).where(
    or_(
        and_(
            entries.c.tenant_id == bindparam("tenant_id"),
            entries.c.id.in_(bindparam("ids", expanding=True)),
        ),
        and_(
            entries.c.session_pk == bindparam("session_pk"),
            entries.c.id.in_(bindparam("refs", expanding=True)),
        ),
    )
)
_AT = datetime(2026, 3, 4, 5, 6, 7, 890, tzinfo=UTC)


def _tombstone(tenant: str, entry_id: str) -> dict[str, Any]:
    return {
        "tenant_id": tenant,
        "scope": "session:s1",
        "entry_id": entry_id,
        "corrected": True,
        "created_at": _AT,
    }


def test_a_row_reads_as_sqlalchemy_reads_it(store: SqlStore, tenant: str, session_id: str) -> None:
    params = {"tenant_id": tenant, "session_id": session_id}
    with store.engine.connect() as connection:
        expected = connection.execute(_SESSION, params).one()
        (row,) = FastStatement(_SESSION).rows(connection, params)
    assert tuple(row) == tuple(expected)
    assert dict(row._mapping) == dict(expected._mapping)
    assert isinstance(row.created_at, datetime) and isinstance(row.meta, dict)
    assert row.id == session_id


def test_values_bound_in_the_statement_are_sent(store: SqlStore, tenant: str) -> None:
    store.create_session(tenant, "a")
    store.create_session(tenant, "b")
    tenant_is = sessions.c.tenant_id == bindparam("tenant_id")
    fixed = FastStatement(select(sessions.c.id).where(tenant_is, sessions.c.id == "b"))
    # A literal list expands into a parameter a value: SQLAlchemy's path, the same answer.
    listed = FastStatement(select(sessions.c.id).where(tenant_is, sessions.c.id.in_(["b", "c"])))
    with store.engine.begin() as connection:
        assert fixed.scalars(connection, {"tenant_id": tenant}) == ["b"]
        assert listed.scalars(connection, {"tenant_id": tenant}) == ["b"]


def test_rows_written_on_the_driver_are_stored_as_sqlalchemy_stores_them(
    store: SqlStore, tenant: str
) -> None:
    with store.engine.begin() as connection:
        connection.execute(_ADD_TOMBSTONE.statement, [_tombstone(tenant, "by-sqlalchemy")])
        _ADD_TOMBSTONE.insert_rows(connection, [_tombstone(tenant, "by-driver")])
    with store.engine.connect() as connection:
        stored = connection.exec_driver_sql(
            "SELECT entry_id, corrected, created_at FROM tombstones ORDER BY entry_id"
        ).all()
    assert [tuple(r)[1:] for r in stored] == [tuple(stored[0])[1:]] * 2
    assert [r[0] for r in stored] == ["by-driver", "by-sqlalchemy"]


def test_listeners_see_every_statement_with_its_parameters_by_name(
    store: SqlStore, tenant: str, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_driver, "INSERT_CHUNK_ROWS", 2)
    seen: list[tuple[str, list[dict[str, Any]]]] = []

    def record(_c: Any, _cur: Any, sql: str, _p: Any, context: Any, _many: bool) -> None:
        seen.append((sql.split()[0], [dict(p) for p in context.compiled_parameters]))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        with store.engine.begin() as connection:
            seen.clear()
            params = {"tenant_id": tenant, "session_id": session_id}
            FastStatement(_SESSION).rows(connection, params)
            _ADD_TOMBSTONE.insert_rows(connection, [_tombstone(tenant, f"e{i}") for i in range(5)])
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    selects = [params for verb, params in seen if verb == "SELECT"]
    assert selects == [[{"tenant_id": tenant, "session_id": session_id}]]
    inserts = [params for verb, params in seen if verb == "INSERT"]
    # Two rows a statement here: five rows are three statements.
    assert [len(p) for p in inserts] == [2, 2, 1]
    assert inserts[2][0]["entry_id"] == "e4"


def test_a_driver_error_is_sqlalchemys_error(store: SqlStore, tenant: str) -> None:
    with store.engine.begin() as connection:
        _ADD_TOMBSTONE.insert_rows(connection, [_tombstone(tenant, "e1")])
    with pytest.raises(IntegrityError) as raised, store.engine.begin() as connection:
        _ADD_TOMBSTONE.insert_rows(connection, [_tombstone(tenant, "e2"), _tombstone(tenant, "e1")])
    assert isinstance(raised.value, DBAPIError)
    with store.engine.connect() as connection:
        # The failed statement wrote nothing: not even the row before the duplicate.
        ids = connection.execute(select(tombstones.c.entry_id)).scalars().all()
    assert ids == ["e1"]


def test_a_statement_on_a_missing_table_fails_as_sqlalchemy_fails(store: SqlStore) -> None:
    missing = Table("no_such_table", MetaData(), Column("x", Integer))
    statement = FastStatement(select(missing.c.x).where(missing.c.x == bindparam("x")))
    with pytest.raises(DBAPIError, match="no_such_table"), store.engine.connect() as connection:
        statement.rows(connection, {"x": 1})


def test_in_lists_find_what_sqlalchemy_finds(store: SqlStore, tenant: str) -> None:
    session = store.create_session(tenant, "lists")
    store.append_entries(tenant, "lists", [message(f"m{i}", session_id="lists") for i in range(3)])
    ids = [e.id for e in store.read_branch(tenant, "lists")]
    with store.engine.begin() as connection:
        pk = connection.execute(select(sessions.c.pk).where(sessions.c.id == session.id)).one()[0]
        for wanted, refs in ((ids[:1], ids[1:]), (ids, []), ([], ids[2:]), (["nowhere"], ids)):
            params = {"tenant_id": tenant, "ids": wanted, "session_pk": pk, "refs": refs}
            # The statement SQLAlchemy expands, run on SQLAlchemy's path everywhere ...
            expected = sorted(tuple(r) for r in connection.execute(_EXPANDED_LOOKUP, params))
            found = FastStatement(_EXPANDED_LOOKUP).rows(connection, params)
            assert sorted(tuple(r) for r in found) == expected
            # ... and the store's own lookup, each list one value on the driver.
            as_rows = entry_rows.EntryRepository(connection)._rows_of_lookup(params)
            assert sorted(tuple(r) for r in as_rows) == expected
            assert len(expected) == len(set(wanted) & set(ids) | set(refs))


def test_outside_a_transaction_sqlalchemy_begins_one_first(store: SqlStore, tenant: str) -> None:
    statement = FastStatement(
        select(tombstones.c.entry_id).where(tombstones.c.tenant_id == bindparam("t"))
    )
    with store.engine.connect() as connection:
        assert not connection.in_transaction()
        assert statement.rows(connection, {"t": tenant}) == []
        assert connection.in_transaction()  # SQLAlchemy's autobegin: its path was taken


def test_inside_a_transaction_a_read_runs_on_the_driver(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    contexts: list[object] = []

    def record(_c: Any, _cur: Any, _sql: str, _p: Any, context: Any, _many: bool) -> None:
        contexts.append(context)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        with store.engine.begin() as connection:
            FastStatement(_SESSION).rows(
                connection, {"tenant_id": tenant, "session_id": session_id}
            )
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    # SQLAlchemy's own path would announce its execution context instead.
    assert [type(c) for c in contexts] == [store_driver.Announced]


def test_a_percent_sign_in_the_sql_is_not_a_parameter(store: SqlStore) -> None:
    # psycopg's placeholders are rewritten as positional ones; an escaped "%" stays escaped.
    share = literal_column("'100%'").label("share")
    statement = FastStatement(select(share, bindparam("x").label("x"), bindparam("x").label("y")))
    with store.engine.begin() as connection:
        assert tuple(statement.one(connection, {"x": "z"})) == ("100%", "z", "z")
