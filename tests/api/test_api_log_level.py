"""``om api --log-level`` sets the level of the whole service: at ``warning`` the app writes no
line a request (its request log is at info), at ``info`` it does."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from om_workers.coordination.embedded import EmbeddedRedis
from tests.api.processes import start_api

STOP_WAIT_S = 60


@pytest.mark.parametrize(("option", "logged"), [("warning", False), ("info", True)])
def test_the_log_level_option_reaches_the_request_log(
    migrated_url: str, redis_server: EmbeddedRedis, tmp_path: Path, option: str, logged: bool
) -> None:
    log = tmp_path / "api.log"
    # The environment says info: the option must win over it.
    process, url = start_api(
        migrated_url, redis_server.url, log, "--log-level", option, OM_LOG_LEVEL="INFO"
    )
    try:
        for _ in range(3):
            assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=STOP_WAIT_S)
    request_lines = [line for line in log.read_text().splitlines() if '"request"' in line]
    assert bool(request_lines) is logged, log.read_text()[-2000:]
