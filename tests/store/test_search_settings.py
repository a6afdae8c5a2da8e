"""A search's transaction on PostgreSQL: plans for its own values and reads ahead, in that
transaction only; a server refusing the reads ahead is searched without them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, create_engine, event

from om_workers.store.engine import normalize_database_url
from om_workers.store.search_settings import READ_AHEAD, tune_for_search
from tests.conftest import fresh_database, needs_postgres


@pytest.fixture
def pg_engine(tmp_path: Path) -> Iterator[Engine]:
    with fresh_database("postgresql", tmp_path) as url:
        engine = create_engine(normalize_database_url(url))
        yield engine
        engine.dispose()


def _settings(connection: Connection) -> tuple[str, str]:
    row = connection.exec_driver_sql(
        "SELECT current_setting('plan_cache_mode'), current_setting('effective_io_concurrency')"
    ).one()
    return str(row[0]), str(row[1])


def _sent(engine: Engine) -> list[str]:
    sent: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: sent.append(args[2]))
    return sent


@needs_postgres
def test_a_search_transaction_plans_for_its_values_and_reads_ahead(pg_engine: Engine) -> None:
    with pg_engine.connect() as connection:
        server_default = _settings(connection)[1]
        connection.rollback()
        for _ in range(2):  # the first search learns what the server takes, the next knows
            with connection.begin():
                tune_for_search(connection)
                assert _settings(connection) == ("force_custom_plan", str(READ_AHEAD))
            # SET LOCAL: the connection's next transaction runs on the server's settings.
            with connection.begin():
                assert _settings(connection) == ("auto", server_default)


@needs_postgres
def test_a_server_refusing_the_reads_ahead_is_searched_without_them(pg_engine: Engine) -> None:
    # -1 is outside the setting's range: the server refuses it as a server without prefetch
    # support refuses any value but 0.
    sent = _sent(pg_engine)
    with pg_engine.connect() as connection:
        server_default = _settings(connection)[1]
        connection.rollback()
        with connection.begin():
            tune_for_search(connection, read_ahead=-1)
            assert _settings(connection) == ("force_custom_plan", server_default)
        asked = len(sent)
        with connection.begin():
            tune_for_search(connection, read_ahead=-1)
            assert _settings(connection) == ("force_custom_plan", server_default)
    # Not asked again: one statement, the plans' setting alone.
    assert [s for s in sent[asked:] if "set_config" in s or "SET LOCAL" in s] == [
        "SET LOCAL plan_cache_mode = force_custom_plan"
    ]


def test_a_search_on_sqlite_sets_nothing(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'om.db'}")
    sent = _sent(engine)
    with engine.connect() as connection, connection.begin():
        tune_for_search(connection)
    assert sent == []
    engine.dispose()
