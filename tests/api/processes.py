"""Real ``om api`` processes for tests that need more than one process or kill one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from om_workers.coordination.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0


def start_api(
    database_url: str, redis_url: str, log: Path, *options: str, **env: str
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``om api`` (with ``options``) on a free port of 127.0.0.1 with the given ``OM_*``
    overrides, its output appended to ``log``; returns the process and its base URL once
    ``/readyz`` answers. The caller stops the process."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    environment.update(PYTHONPATH=str(ROOT), OM_DATABASE_URL=database_url, OM_REDIS_URL=redis_url)
    environment.update(env)
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "om_api.cli", "api"),
                *("--host", "127.0.0.1", "--port", str(port), *options),
            ],
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


RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


@dataclass
class ApiProcess:
    """A running ``om api`` on a port it chose: its base URL and the lines it has written to
    stderr so far (its JSON log)."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    url: str = ""


@contextmanager
def api_process(database_url: str, redis_url: str, **env: str) -> Iterator[ApiProcess]:
    """``om api --port 0`` on 127.0.0.1 with the given ``OM_*`` overrides, its stderr read into
    ``lines``; yields once it says where it listens, terminates it (then kills) on exit.
    Raises ``RuntimeError`` when it exits or stays silent for :data:`START_TIMEOUT_S`."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    environment.update(PYTHONPATH=str(ROOT), OM_DATABASE_URL=database_url, OM_REDIS_URL=redis_url)
    environment.update(env)
    process = subprocess.Popen(
        [sys.executable, "-m", "om_api.cli", "api", "--host", "127.0.0.1", "--port", "0"],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    api = ApiProcess(process)
    reader = threading.Thread(target=_read, args=(process.stderr, api.lines), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not api.url:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("om api did not start: " + "\n".join(api.lines[-20:]))
            for line in list(api.lines):
                if match := RUNNING.search(line):
                    api.url = f"http://127.0.0.1:{match.group(1)}"
            time.sleep(0.05)
        yield api
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(timeout=10)


def _read(stream: IO[str] | None, lines: list[str]) -> None:
    for line in stream or ():
        lines.append(line.rstrip("\n"))
