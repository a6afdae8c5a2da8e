"""``om api --workers 2``: two processes serve one port, and what they share lives in Redis, so
one key's rate limit holds across both (as across replicas)."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import AccountStore, SqlStore, upgrade
from tests.cli.test_commands import OM, ROOT, env

READY_S = 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _children(pid: int) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line
            )
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(pid):
            found.append(int(status.parent.name))
    return found


def test_two_api_processes_serve_one_port_and_share_a_keys_rate_limit(
    redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    database_url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    accounts = AccountStore(store.engine)
    key = accounts.create_api_key(accounts.create_tenant("w").id).plaintext
    store.close()
    port = _free_port()
    log = tmp_path / "api.log"
    settings = env(
        OM_REDIS_URL=redis_server.url,
        OM_DATABASE_URL=database_url,
        OM_RATE_READS_BURST="5",
        OM_RATE_READS_PER_S="0.01",
    )
    with log.open("w") as out:
        process = subprocess.Popen(
            [*OM, "api", "--port", str(port), "--workers", "2"],
            env=settings,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_S
        while len(_children(process.pid)) < 2 or not _ready(url):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        # A fresh connection a request: the kernel spreads them over both processes.
        statuses = []
        for _ in range(12):
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as one:
                answer = one.get("/v1/sessions")
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                assert int(answer.headers["Retry-After"]) >= 1
        assert statuses.count(200) == 5 and statuses.count(429) == 7, statuses
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 0, log.read_text()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False
