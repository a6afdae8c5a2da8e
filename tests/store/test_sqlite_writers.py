"""SQLite writers of several processes queue on an advisory lock beside the database file, so
a process waits for the writer ahead of it instead of sleeping in SQLite's busy handler; a
holder that never lets go only delays a writer by the timeout, after which SQLite decides."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from om_core.backoff import backoff_delay_s
from om_workers.store.engine import WRITER_POLL, _SqliteWriters

HOLD_S = 0.5


def _hold(lock_file: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process that takes the file lock, says so, and holds it for ``seconds``."""
    script = (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(lock_file)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        f"time.sleep({seconds})\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def test_a_writer_waits_for_another_process_and_then_holds_the_file(tmp_path: Path) -> None:
    database = tmp_path / "om.db"
    other = _hold(Path(f"{database}-writers"), HOLD_S)
    writers = _SqliteWriters(str(database))
    started = time.monotonic()
    with writers.held():
        waited = time.monotonic() - started
        # Now this process holds it: a third process cannot take it without waiting.
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import fcntl, os\n"
                f"fd = os.open({str(database) + '-writers'!r}, os.O_RDWR)\n"
                "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
                "except BlockingIOError:\n    print('busy')\n",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    other.wait(timeout=10)
    assert probe.stdout.strip() == "busy"
    assert waited >= HOLD_S * 0.5  # it waited for the other process's write, not around it


def test_a_holder_that_never_lets_go_delays_a_writer_only_by_the_timeout(tmp_path: Path) -> None:
    database = tmp_path / "om.db"
    stuck = _hold(Path(f"{database}-writers"), 60)
    try:
        started = time.monotonic()
        with _SqliteWriters(str(database)).held(timeout_s=0.2):
            assert time.monotonic() - started >= 0.2
    finally:
        stuck.kill()
        stuck.wait()


def test_threads_of_one_process_reenter_and_an_in_memory_database_has_no_file() -> None:
    writers = _SqliteWriters(":memory:")
    with writers.held(), writers.held():
        pass


@pytest.mark.parametrize(
    ("poll", "delay_s"),
    [(1, 0.0001), (2, 0.0002), (3, 0.0004), (4, 0.0008), (5, 0.001), (9, 0.001)],
)
def test_the_poll_interval_grows_from_a_tenth_of_a_millisecond_to_one(
    poll: int, delay_s: float
) -> None:
    assert backoff_delay_s(poll, WRITER_POLL, 0.0) == pytest.approx(delay_s)
