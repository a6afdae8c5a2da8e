"""The compose topology rehearsed with local processes (see :mod:`tests.deploy.rehearsal`):
PostgreSQL, Redis, migration, API, three workers, beat and Flower from the compose commands,
a load of flushes through the HTTP API, one worker killed mid-load, every run completed and
every message observed exactly once. Nothing is left running."""

from __future__ import annotations

import os
import signal

import pytest

from tests.deploy.rehearsal import Config, Rehearsal, postgres_available


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_compose_topology_survives_a_killed_worker_under_load() -> None:
    if (reason := postgres_available()) is not None:
        pytest.skip(f"the rehearsal needs PostgreSQL: {reason}")
    rehearsal = Rehearsal(Config(workers=3, kill=signal.SIGKILL))
    pids: list[int] = []
    try:
        rehearsal.start()
        pids = rehearsal.pids()
        assert len(pids) == 3 + 3 + 1  # api, beat, flower, 3 workers, redis
        report = rehearsal.run_load()
    finally:
        rehearsal.stop()
    states = report.states()
    # "failed" only for the killed worker's jobs, swept by the reconciler once their lock
    # expired (run_load fails on any other failure, and checks their sessions' memory).
    assert set(states) <= {"succeeded", "skipped", "failed"} and states["succeeded"] >= 8, states
    assert states.get("failed", 0) <= 3, states
    assert report.killed_pid is not None and report.messages == 8 * 4 * 4
    assert report.observations == report.messages  # one observation a message (LOW settings)
    assert not [pid for pid in pids if _alive(pid)], "processes left behind"
