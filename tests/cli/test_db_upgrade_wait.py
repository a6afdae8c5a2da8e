"""``om db upgrade`` beside a database that is still starting: it retries until the server
answers, within its bound (``--wait-s``), and gives up with the store's error after it.

The late database is a real PostgreSQL (``OM_TEST_DATABASE_URL``) behind a port that opens only
a few seconds after the command started; the bound is checked on a port that never opens.
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
from tests.chaos.proxy import FaultProxy
from tests.conftest import PG_URL, fresh_database

ROOT = Path(__file__).resolve().parents[2]
LATE_S = 3.0


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


@pytest.mark.skipif(PG_URL is None, reason="OM_TEST_DATABASE_URL is not set")
def test_upgrade_waits_for_a_database_whose_port_opens_late(tmp_path: Path) -> None:
    with fresh_database("postgresql", tmp_path) as direct:
        target = make_url(direct)
        assert target.host and target.port
        port = free_port()
        late = target.set(port=port).render_as_string(hide_password=False)
        began = time.monotonic()
        command = _start("--database-url", late, "--wait-s", "30")
        time.sleep(LATE_S)
        with FaultProxy(target.host, target.port, name="late-postgres", port=port):
            out, err = command.communicate(timeout=60)
        took = time.monotonic() - began
        assert command.returncode == 0, err
        assert "database at revision" in out
        assert "database not reachable yet" in err  # it did meet the closed port first
        assert took >= LATE_S
        engine = create_engine(direct)
        try:
            tables = set(inspect(engine).get_table_names())
        finally:
            engine.dispose()
        assert {"tenants", "sessions", "flush_jobs"} <= tables


def test_upgrade_gives_up_after_its_bound_with_the_store_error() -> None:
    began = time.monotonic()
    command = _start("--database-url", _unreachable_url(), "--wait-s", "2")
    _, err = command.communicate(timeout=60)
    took = time.monotonic() - began
    assert command.returncode == 1
    assert err.count("database not reachable yet") >= 2  # retried, backing off
    assert err.strip().splitlines()[-1] == "om: cannot migrate: OperationalError"
    assert 2.0 <= took < 20.0


def test_no_wait_means_one_attempt() -> None:
    command = _start("--database-url", _unreachable_url(), "--wait-s", "0")
    _, err = command.communicate(timeout=60)
    assert command.returncode == 1
    assert "database not reachable yet" not in err
    assert "cannot migrate" in err
