"""``om db upgrade`` beside a database that is still starting: it retries until the server
answers, within its bound (``--wait-s``), and gives up with the store's error after it.

The late database is a real PostgreSQL (``OM_TEST_DATABASE_URL``) behind a port that opens only
a few seconds after the command started; the bound is checked, in-process, on a port that
never opens.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import make_url

from om_workers.coordination.embedded import free_port
from om_workers.errors import StoreUnavailableError
from om_workers.store import upgrade_when_reachable
from om_workers.store.migrate import RETRY_FIRST_S
from tests.chaos.proxy import FaultProxy
from tests.conftest import fresh_database, needs_postgres

ROOT = Path(__file__).resolve().parents[2]
LATE_S = 1.0


def _start(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    env.update(PYTHONPATH=str(ROOT), NO_COLOR="1")
    return subprocess.Popen(
        [sys.executable, "-m", "om_api.cli", "db", "upgrade", *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _unreachable_url() -> str:
    return f"postgresql+psycopg://om:secret@127.0.0.1:{free_port()}/om"


@needs_postgres
def test_upgrade_waits_for_a_database_whose_port_opens_late(tmp_path: Path) -> None:
    with fresh_database("postgresql", tmp_path) as direct:
        target = make_url(direct)
        assert target.host and target.port
        port = free_port()
        late = target.set(port=port).render_as_string(hide_password=False)
        command = _start("--database-url", late, "--wait-s", "60")
        assert command.stderr is not None
        # The port opens only once the command has met it closed (and said it will retry).
        first = command.stderr.readline()
        assert first.startswith("database not reachable yet"), first
        time.sleep(LATE_S)
        with FaultProxy(target.host, target.port, name="late-postgres", port=port):
            out, err = command.communicate(timeout=90)
        assert command.returncode == 0, first + err
        assert "database at revision" in out
        engine = create_engine(direct)
        try:
            tables = set(inspect(engine).get_table_names())
        finally:
            engine.dispose()
        assert {"tenants", "sessions", "flush_jobs"} <= tables


def test_the_wait_is_bounded_and_ends_with_the_store_error() -> None:
    # The waits run on the test's clock: each pause moves it on, whatever the machine's load.
    now = [0.0]
    retries: list[float] = []

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(StoreUnavailableError, match="cannot migrate"):
        upgrade_when_reachable(
            _unreachable_url(),
            1.5,
            on_retry=lambda _error, pause: retries.append(pause),
            sleep=sleep,
            clock=lambda: now[0],
        )
    assert now[0] == 1.5  # it waited out the budget, and no more
    assert retries == [RETRY_FIRST_S, 1.5 - RETRY_FIRST_S]  # backing off, cut at the budget


def test_no_wait_means_one_attempt() -> None:
    retries: list[float] = []
    with pytest.raises(StoreUnavailableError):
        upgrade_when_reachable(_unreachable_url(), 0, on_retry=lambda _e, p: retries.append(p))
    assert retries == []
