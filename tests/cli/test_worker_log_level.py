"""``om worker --log-level`` sets the level of the worker's own JSON log, over
``OM_LOG_LEVEL``: at ``warning`` the worker writes no info line (its start-up and the tasks it
runs are logged at info), at ``info`` it does."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from om_workers.coordination import keys
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from tests.cli.test_commands import om_worker

START_WAIT_S = 60.0
STOP_WAIT_S = 60.0


@pytest.mark.parametrize(("option", "logged"), [("warning", False), ("info", True)])
def test_the_log_level_option_reaches_the_workers_json_log(
    redis_server: EmbeddedRedis, tmp_path: Path, option: str, logged: bool
) -> None:
    # The environment says info: the option must win over it.
    process, log = om_worker(
        redis_server.url, tmp_path, "-c", "1", "-n", f"{option}@%h", "--log-level", option,
        OM_LOG_LEVEL="INFO",
    )  # fmt: skip
    client = connect(redis_server.url)
    try:
        # Ready once its slots are in the pool: its "ready." line is itself at info.
        deadline = time.monotonic() + START_WAIT_S
        while not client.zcard(keys.POOL):
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=STOP_WAIT_S) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
        client.close()
    records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    info = [record for record in records if record["level"] == "info"]
    assert bool(info) is logged, log.read_text()[-3000:]
