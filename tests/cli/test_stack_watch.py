"""``om up`` watches every child, the private Redis included, and is started once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from om_api.cli.stack import Stack, StackConfig, StackError


def _config(tmp_path: Path) -> StackConfig:
    return StackConfig(
        database_url=f"sqlite:///{tmp_path / 'om.db'}",
        api_port=0,
        beat=False,
        flower=False,
        log_dir=tmp_path / "logs",
    )


def test_a_running_stack_refuses_a_second_start(tmp_path: Path) -> None:
    """A second start would run a second Redis and set of children that stop() never knew."""
    with Stack(_config(tmp_path)) as stack:
        running = stack.pids()
        with pytest.raises(StackError, match="already running"):
            stack.start()
        assert stack.pids() == running
        stack.check_alive()
    for pid in running.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_dead_private_redis_stops_the_stack_with_a_reason(tmp_path: Path) -> None:
    with Stack(_config(tmp_path)) as stack:
        info = stack.info
        stack.check_alive()
        os.kill(info.pids["redis"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        with pytest.raises(StackError, match="redis-server exited"):
            while time.monotonic() < deadline:
                stack.check_alive()
                time.sleep(0.1)
