"""SQLite writers of several processes queue on an advisory lock beside the database file, so
a process waits for the writer ahead of it, and gets the lock as soon as it is released,
instead of sleeping in SQLite's busy handler; a process that dies holding it lets go."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from om_core.ledger.models import SessionEntry
from om_workers.errors import WritersBusyError
from om_workers.store import AccountStore, SqlStore, upgrade
from om_workers.store.engine import _SqliteWriters, writer_connection, writers_not_waited
from tests.threads import CheckedThread


def _taken_elsewhere(database: Path) -> bool:
    """Whether another process would have to wait for the database's writer lock now."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import fcntl, os\n"
            f"fd = os.open({str(database) + '-writers'!r}, os.O_RDWR | os.O_CREAT)\n"
            "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "except BlockingIOError:\n    print('busy')\n",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return probe.stdout.strip() == "busy"


def _hold(lock_file: Path) -> subprocess.Popen[str]:
    """Another process that takes the file lock, says so, and holds it until it reads a line
    on its standard input (or is killed)."""
    script = (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(lock_file)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def test_a_writer_waits_for_another_process_and_then_holds_the_file(tmp_path: Path) -> None:
    database = tmp_path / "om.db"
    other = _hold(Path(f"{database}-writers"))
    writers = _SqliteWriters(str(database))
    trying, let_go = threading.Event(), threading.Event()
    order: list[str] = []

    def write() -> None:
        trying.set()
        with writers.held():
            order.append("released before" if let_go.is_set() else "taken around the holder")
            # Now this process holds it: a third process cannot take it without waiting.
            order.append("held" if _taken_elsewhere(database) else "not held")

    writer = CheckedThread(write)
    writer.start()
    assert trying.wait(60)
    # Time for a broken lock to let the writer through while the other process holds it (on a
    # loaded machine the check gets weaker, never wrong).
    time.sleep(0.2)
    assert other.stdin is not None
    let_go.set()
    other.stdin.write("go\n")
    other.stdin.flush()
    writer.join(60)
    other.wait(timeout=60)
    assert order == ["released before", "held"]  # it waited for the other process's write


def test_a_process_killed_holding_the_lock_lets_go(tmp_path: Path) -> None:
    database = tmp_path / "om.db"
    holder = _hold(Path(f"{database}-writers"))
    holder.kill()
    holder.wait()
    with _SqliteWriters(str(database)).held():
        pass


def test_a_single_writer_beside_a_busy_multi_threaded_process_is_not_starved(
    tmp_path: Path,
) -> None:
    """Another process whose 8 threads pass the lock among themselves back to back (as a
    busy worker's do) does not keep this process's writer waiting for the whole of it: the
    lock is ours again and again while they churn (they never stop; a deadline only bounds a
    failing run)."""
    database = tmp_path / "om.db"
    script = (
        "import sys, threading, time\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "from om_workers.store.engine import _SqliteWriters\n"
        f"writers = _SqliteWriters({str(database)!r})\n"
        "def churn():\n"
        "    while True:\n"
        "        with writers.held():\n"
        "            time.sleep(0.001)\n"
        "threads = [threading.Thread(target=churn, daemon=True) for _ in range(8)]\n"
        "[t.start() for t in threads]\n"
        "print('busy', flush=True)\n"
        "[t.join() for t in threads]\n"
    )
    busy = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout is not None and busy.stdout.readline().strip() == "busy"
        writers = _SqliteWriters(str(database))
        got = 0
        deadline = time.monotonic() + 120
        while got < 20 and time.monotonic() < deadline:
            with writers.held():
                got += 1
        assert busy.poll() is None  # the other side churned the whole time
        assert got == 20, got
    finally:
        busy.kill()
        busy.wait()


def test_a_nested_hold_keeps_the_file_lock_until_the_outer_one_ends(tmp_path: Path) -> None:
    database = tmp_path / "om.db"
    writers = _SqliteWriters(str(database))
    with writers.held():
        with writers.held():
            assert _taken_elsewhere(database)
        assert _taken_elsewhere(database)  # the inner end did not let go
    assert not _taken_elsewhere(database)


def test_an_in_memory_database_has_no_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with _SqliteWriters(":memory:").held():
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_writer_that_may_not_wait_is_refused_while_another_holds_the_queue(
    tmp_path: Path,
) -> None:
    database = tmp_path / "om.db"
    writers = _SqliteWriters(str(database))
    other = _hold(Path(f"{database}-writers"))
    with pytest.raises(WritersBusyError, match="another process"), writers.held(wait=False):
        pytest.fail("held while another process holds the file")
    assert other.stdin is not None
    other.stdin.write("go\n")
    other.stdin.flush()
    other.wait(timeout=60)
    held_elsewhere = threading.Event()
    let_go = threading.Event()

    def hold_in_another_thread() -> None:
        with writers.held():
            held_elsewhere.set()
            let_go.wait(60)

    holder = CheckedThread(hold_in_another_thread)
    holder.start()
    assert held_elsewhere.wait(60)
    with pytest.raises(WritersBusyError, match="another thread"), writers.held(wait=False):
        pytest.fail("held while another thread holds the queue")
    let_go.set()
    holder.join(60)
    with writers.held(wait=False):
        assert _taken_elsewhere(database)  # free again: taken at once, file lock included
    assert not _taken_elsewhere(database)


def test_writes_not_waited_for_raise_before_anything_is_written(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(url)
    store = SqlStore.from_url(url)
    try:
        tenant = AccountStore(store.engine).create_tenant("t").id
        store.create_session(tenant, "s")
        other = _hold(Path(f"{tmp_path / 'om.db'}-writers"))
        entry = SessionEntry.model_validate(
            {"id": "e1", "sessionId": "s", "kind": "message",
             "message": {"role": "user", "content": "hi"}}
        )  # fmt: skip
        with writers_not_waited(), pytest.raises(WritersBusyError):
            store.append_entries(tenant, "s", [entry])
        assert other.stdin is not None
        other.stdin.write("go\n")
        other.stdin.flush()
        other.wait(timeout=60)
        assert store.get_session(tenant, "s").entry_count == 0
        with writers_not_waited():
            store.append_entries(tenant, "s", [entry])
        assert store.get_session(tenant, "s").entry_count == 1
    finally:
        store.close()


def _write_lock_free(database: Path) -> bool:
    """Whether another connection could take SQLite's write lock now, without waiting."""
    probe = sqlite3.connect(database, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


def test_a_write_transaction_takes_the_write_lock_first_and_a_read_never(tmp_path: Path) -> None:
    database = tmp_path / "lock.db"
    url = f"sqlite:///{database}"
    upgrade(url)
    store = SqlStore.from_url(url)
    try:
        with writer_connection(store.engine) as connection, connection.begin():
            # Nothing written yet: the lock is taken by the BEGIN itself (IMMEDIATE).
            assert not _write_lock_free(database)
        assert _write_lock_free(database)
        # The same pooled connection, later used for a read, begins DEFERRED again.
        with store.engine.connect() as connection, connection.begin():
            connection.exec_driver_sql("SELECT count(*) FROM sessions").all()
            assert _write_lock_free(database)
    finally:
        store.close()
