"""Real ``celery worker`` subprocesses for the end-to-end tests, ended by pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from tests.e2e.support import LOW

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0
FINAL = frozenset({"succeeded", "failed", "skipped"})


@dataclass(frozen=True)
class RunRow:
    id: str
    state: str
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None


def worker_env(redis_url: str, database_url: str, **extra: str) -> dict[str, str]:
    """Environment of a worker: short lock TTL, slow-able test provider, low thresholds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    env.update(
        OM_REDIS_URL=redis_url,
        OM_DATABASE_URL=database_url,
        OM_PROVIDER="tests.e2e.providers:slow",
        OM_SETTINGS_JSON=json.dumps(LOW),
        OM_LOCK_TTL_S="2",
        OM_WORKER_CONCURRENCY="4",
        OM_HTTP_TIMEOUT_S="2",
        OM_SOFT_TIME_LIMIT_S="20",
        OM_HARD_TIME_LIMIT_S="25",
        OM_VISIBILITY_TIMEOUT_S="30",
        OM_TEST_PROVIDER_DELAY_S="0",
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


class Worker:
    """One ``celery worker`` process (threads pool) logging to ``log``."""

    def __init__(self, name: str, env: Mapping[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        args = [
            sys.executable, "-m", "celery", "-A", "om_workers.celery.app", "worker",
            "-P", "threads", "-c", env.get("OM_WORKER_CONCURRENCY", "4"), "-Q", "om",
            "--without-gossip", "--without-mingle", "--without-heartbeat", "-E",
            "-n", f"{name}@%h", "--loglevel=INFO",
        ]  # fmt: skip
        # A log reused by an earlier worker already says " ready.": look only past its end.
        self._log_start = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                args, cwd=ROOT, env=dict(env), stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"worker {self.name} exited: {self.tail()}")
            with self.log.open("rb") as log:
                log.seek(self._log_start)
                if b" ready." in log.read():
                    return
            time.sleep(0.1)
        raise AssertionError(f"worker {self.name} not ready in {READY_TIMEOUT_S} s: {self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        """A crash: SIGKILL, nothing runs after it."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """A warm shutdown (SIGTERM), then SIGKILL if it does not end within 15 s."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def runs_of(database_url: str, session_id: str) -> list[RunRow]:
    """Every job row of the session, read straight from the store's table."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows: Any = connection.execute(
                text(
                    "SELECT r.id, r.state, r.attempts, r.started_at, r.finished_at, r.error "
                    "FROM flush_jobs r JOIN sessions s ON s.pk = r.session_pk "
                    "WHERE s.id = :sid ORDER BY r.queued_at"
                ),
                {"sid": session_id},
            ).all()
    finally:
        engine.dispose()
    return [RunRow(r[0], r[1], int(r[2]), as_datetime(r[3]), as_datetime(r[4]), r[5]) for r in rows]


def as_datetime(value: Any) -> datetime | None:
    """A job row's timestamp as read back from SQLite (text) or PostgreSQL (datetime)."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def settled(database_url: str, session: str) -> bool:
    """True when the session has job rows and every one has finished."""
    runs = runs_of(database_url, session)
    return bool(runs) and all(r.state in FINAL for r in runs)


StartWorker = Callable[..., Worker]
