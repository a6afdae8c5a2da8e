"""Pooled PostgreSQL connections: one that sat idle is pinged at checkout and replaced when
dead; one in steady use is not pinged, and when its server side is gone the caller gets the
store's 503 error once, then a fresh connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from sqlalchemy import Engine, bindparam, create_engine, event, select
from sqlalchemy.exc import DBAPIError
from store_factories import message

from om_workers.errors import SessionNotFoundError, StoreUnavailableError
from om_workers.store import AccountStore, SqlStore, upgrade
from om_workers.store import engine as store_engine
from om_workers.store.driver import FastStatement
from om_workers.store.engine import normalize_database_url
from tests.conftest import PG_URL, fresh_database, needs_postgres

pytestmark = needs_postgres


@pytest.fixture
def pg_store(tmp_path: Path) -> Iterator[SqlStore]:
    with fresh_database("postgresql", tmp_path) as url:
        upgrade(url)
        store = SqlStore.from_url(url)
        yield store
        store.close()


def _terminate_pooled_backends(engine: Engine, count: int = 1) -> None:
    """End, from the server side, the ``count`` connections the engine's pool holds."""
    pids: list[int] = []
    with ExitStack() as held:
        for _ in range(count):
            connection = held.enter_context(engine.connect())
            pids.append(int(connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()))
    admin = create_engine(normalize_database_url(str(PG_URL)))
    try:
        with admin.begin() as connection:
            for pid in pids:
                connection.exec_driver_sql(f"SELECT pg_terminate_backend({pid})")
    finally:
        admin.dispose()


def _pings(engine: Engine) -> list[str]:
    seen: list[str] = []
    original = engine.dialect.do_ping

    def counted(dbapi_connection: object) -> bool:
        seen.append("ping")
        return original(dbapi_connection)

    engine.dialect.do_ping = counted  # type: ignore[method-assign]
    return seen


def test_a_connection_in_steady_use_is_not_pinged(pg_store: SqlStore) -> None:
    pings = _pings(pg_store.engine)
    for _ in range(5):
        with pg_store.engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
    assert pings == []


def test_an_idle_dead_connection_is_replaced_before_use(
    pg_store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _terminate_pooled_backends(pg_store.engine)
    monkeypatch.setattr(store_engine, "PING_AFTER_IDLE_S", 0.0)
    pings = _pings(pg_store.engine)
    connects: list[str] = []
    event.listen(pg_store.engine, "connect", lambda *_: connects.append("connect"))
    with pg_store.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT 1").scalar_one() == 1
    assert pings and connects == ["connect"]


def test_a_busy_connection_lost_fails_once_then_the_pool_heals(pg_store: SqlStore) -> None:
    _terminate_pooled_backends(pg_store.engine)
    with pytest.raises(StoreUnavailableError):
        pg_store.get_session("nobody", "nothing")
    with pytest.raises(SessionNotFoundError):
        pg_store.get_session("nobody", "nothing")


def test_a_statement_on_the_driver_that_loses_its_server_heals_the_whole_pool(
    pg_store: SqlStore,
) -> None:
    # Statements run straight on psycopg still let SQLAlchemy see a lost server: it
    # invalidates every pooled connection at once, so only the first caller fails.
    _terminate_pooled_backends(pg_store.engine, count=2)
    statement = FastStatement(select(bindparam("x")))
    connects: list[str] = []
    event.listen(pg_store.engine, "connect", lambda *_: connects.append("connect"))
    with pg_store.engine.connect() as connection:
        connection.begin()
        with pytest.raises(DBAPIError) as raised:
            statement.rows(connection, {"x": 1})
        assert raised.value.connection_invalidated and connection.invalidated
    for _ in range(2):
        with pg_store.engine.begin() as first, pg_store.engine.begin() as second:
            assert statement.scalars(first, {"x": 1}) == [1]
            assert statement.scalars(second, {"x": 2}) == [2]
    assert connects == ["connect", "connect"]


def test_statements_stay_prepared_across_read_units_of_work(tmp_path: Path) -> None:
    # psycopg prepares a statement on its fifth use on a connection, and forgets all it
    # prepared at a ROLLBACK: reads (READ ONLY) end with COMMIT, so a pooled connection's hot
    # statements are parsed once, not at every read.
    with fresh_database("postgresql", tmp_path) as url:
        upgrade(url)
        store = SqlStore.from_url(url, pool_size=1, max_overflow=0)
        try:
            tenant = AccountStore(store.engine).create_tenant("t").id
            store.create_session(tenant, "s")
            store.append_entries(tenant, "s", [message("m1", "s", "hello")])
            for _ in range(8):
                assert [entry.id for entry in store.read_branch(tenant, "s")] == ["m1"]
            with store.engine.connect() as connection:
                prepared = connection.exec_driver_sql(
                    "SELECT count(*) FROM pg_prepared_statements"
                ).scalar_one()
            assert prepared >= 1
            # A search plans its statements for their own values (a plan made for a large
            # tenant's words is not one for a small tenant's), in its own transaction only.
            sent: list[str] = []
            event.listen(store.engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
            assert store.search(tenant, "hello").hits[0].id == "m1"
            assert any("force_custom_plan" in statement for statement in sent)
            with store.engine.connect() as connection:
                mode = connection.exec_driver_sql("SHOW plan_cache_mode").scalar_one()
            assert mode == "auto"
        finally:
            store.close()
