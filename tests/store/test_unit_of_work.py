"""The unit of work owns the transaction: a commit keeps what the block wrote, anything else
rolls it back; database errors leave it as store errors; readers never queue behind writers."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.exc import IntegrityError
from store_factories import message

from om_workers.errors import SessionNotFoundError, StoreError, StoreUnavailableError
from om_workers.store import SqlReadUnitOfWork, SqlStore, SqlUnitOfWork
from om_workers.store.engine import create_store_engine
from om_workers.store.service import retry_once_after_race
from om_workers.store.unit_of_work import WriteRace

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _insert(uow: SqlUnitOfWork, tenant: str, session_id: str) -> None:
    uow.sessions.insert(tenant, session_id, metadata={}, workspace_id=None, now=NOW)


def test_a_commit_keeps_the_block_and_leaving_without_one_rolls_it_back(
    store: SqlStore, tenant: str
) -> None:
    with SqlUnitOfWork(store.engine) as uow:
        _insert(uow, tenant, "kept")
        uow.commit()
    with SqlUnitOfWork(store.engine) as uow:
        _insert(uow, tenant, "dropped")
        # Seen inside its own transaction ...
        assert uow.sessions.exists(tenant, "dropped")
    # ... and gone once the block ended without a commit.
    assert store.get_session(tenant, "kept").id == "kept"
    with pytest.raises(SessionNotFoundError):
        store.get_session(tenant, "dropped")


def test_actions_after_commit_run_once_committed_and_never_after_a_rollback(
    store: SqlStore, tenant: str
) -> None:
    ran: list[str] = []
    with SqlUnitOfWork(store.engine) as uow:
        _insert(uow, tenant, "kept")
        uow.after_commit(lambda: ran.append("kept"))
        assert ran == []
        uow.commit()
        assert ran == ["kept"]
    with SqlUnitOfWork(store.engine) as uow:
        _insert(uow, tenant, "dropped")
        uow.after_commit(lambda: ran.append("dropped"))
    with SqlUnitOfWork(store.engine) as uow:
        _insert(uow, tenant, "rolled back")
        uow.after_commit(lambda: ran.append("rolled back"))
        uow.rollback()
    assert ran == ["kept"]


def test_an_error_in_the_block_rolls_back_and_passes_through_unchanged(
    store: SqlStore, tenant: str
) -> None:
    with pytest.raises(ZeroDivisionError), SqlUnitOfWork(store.engine) as uow:
        _insert(uow, tenant, "s1")
        _ = 1 / 0
    with SqlReadUnitOfWork(store.engine) as reader:
        assert not reader.sessions.exists(tenant, "s1")


def test_database_errors_leave_as_store_errors(
    store: SqlStore, tenant: str, tmp_path: Path
) -> None:
    store.create_session(tenant, "s1")
    # A unique key hit inside the block: the race the service layer retries once.
    with pytest.raises(WriteRace) as raced, SqlUnitOfWork(store.engine) as uow:
        _insert(uow, tenant, "s1")
    assert isinstance(raced.value.__cause__, IntegrityError)
    # A database that cannot be opened: on entering.
    missing = create_store_engine(f"sqlite:///{tmp_path / 'no' / 'such' / 'om.db'}")
    with pytest.raises(StoreUnavailableError), SqlReadUnitOfWork(missing):
        pass


def test_a_reader_does_not_wait_for_an_open_writer(store: SqlStore, tenant: str) -> None:
    store.create_session(tenant, "s1")
    read: list[str] = []

    def reader() -> None:
        with SqlReadUnitOfWork(store.engine) as uow:
            read.append(uow.sessions.info(tenant, "s1").id)

    with SqlUnitOfWork(store.engine) as writer:
        writer.sessions.lock(tenant, "s1")  # holds the session row (and SQLite's write lock)
        thread = threading.Thread(target=reader)
        thread.start()
        thread.join(timeout=10)
        # The reader finished while the writer still held its transaction open.
        assert read == ["s1"]


def test_a_lost_race_is_run_once_more_and_a_second_one_is_a_store_error() -> None:
    calls: list[int] = []

    def races(times: int) -> str:
        calls.append(1)
        if len(calls) <= times:
            raise WriteRace("unique key taken meanwhile")
        return "done"

    assert retry_once_after_race(lambda: races(1)) == "done"
    assert len(calls) == 2
    calls.clear()
    with pytest.raises(StoreError) as raised:
        retry_once_after_race(lambda: races(2))
    assert not isinstance(raised.value, WriteRace) and len(calls) == 2


def test_a_read_block_sees_one_snapshot_while_others_commit(store: SqlStore, tenant: str) -> None:
    # A context read takes the session's head, its memory and its tail in several statements:
    # a commit between two of them must not show in the second.
    store.create_session(tenant, "s1")
    with SqlReadUnitOfWork(store.engine) as reader:
        before = reader.sessions.info(tenant, "s1")
        with SqlUnitOfWork(store.engine) as writer:
            _insert(writer, tenant, "s2")
            writer.commit()
        store.append_entries(tenant, "s1", [message("m1")])
        store.raise_epoch(tenant, "s1")
        assert reader.sessions.info(tenant, "s1") == before
        assert not reader.sessions.exists(tenant, "s2")
    with SqlReadUnitOfWork(store.engine) as later:
        assert later.sessions.exists(tenant, "s2")
        assert later.sessions.info(tenant, "s1") != before


def test_a_one_statement_read_opens_no_transaction(store: SqlStore, tenant: str) -> None:
    store.create_session(tenant, "s1")
    # The second block takes the pooled connection the first one gave back: a read of
    # several statements still gets its transaction.
    for one_statement, outside in ((True, "IDLE"), (False, "INTRANS")):
        with SqlReadUnitOfWork(store.engine, one_statement=one_statement) as reader:
            assert reader.sessions.exists(tenant, "s1")
            driver = reader.sessions._connection.connection.driver_connection
            if store.engine.dialect.name == "postgresql":
                # Autocommit: the statement was its own transaction, none is left open.
                assert driver.info.transaction_status.name == outside  # type: ignore[union-attr]
