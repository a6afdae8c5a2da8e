"""Real ``om api`` processes for tests that need more than one process or kill one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from om_workers.coordination.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0


def start_api(
    database_url: str, redis_url: str, log: Path, **env: str
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``om api`` on a free port of 127.0.0.1 with the given ``OM_*`` overrides, its
    output appended to ``log``; returns the process and its base URL once ``/readyz`` answers.
    The caller stops the process."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    environment.update(PYTHONPATH=str(ROOT), OM_DATABASE_URL=database_url, OM_REDIS_URL=redis_url)
    environment.update(env)
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "om_api.cli", "api", "--host", "127.0.0.1", "--port", str(port)],
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        assert process.poll() is None, log.read_text()
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
