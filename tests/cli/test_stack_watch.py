"""``om up`` watches every child, the private Redis included."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from om_api.cli.stack import Stack, StackConfig, StackError


def test_a_dead_private_redis_stops_the_stack_with_a_reason(tmp_path: Path) -> None:
    config = StackConfig(
        database_url=f"sqlite:///{tmp_path / 'om.db'}",
        api_port=0,
        beat=False,
        flower=False,
        log_dir=tmp_path / "logs",
    )
    with Stack(config) as stack:
        info = stack.start()
        stack.check_alive()
        os.kill(info.pids["redis"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        with pytest.raises(StackError, match="redis-server exited"):
            while time.monotonic() < deadline:
                stack.check_alive()
                time.sleep(0.1)
