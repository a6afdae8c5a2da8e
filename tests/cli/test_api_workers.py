"""``om api --workers 2``: two processes serve one port, and what they share lives in Redis, so
one key's rate limit holds across both (as across replicas)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from om_api.cli.api_processes import reuse_port_sockets
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


def _sockets(pid: int, port: int, state: str) -> int:
    """TCP sockets of process ``pid`` on local ``port`` in ``state`` (``0A`` listening, ``01``
    established), from ``/proc``."""
    inodes = set()
    with contextlib.suppress(OSError):  # the process may be gone meanwhile
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text(encoding="ascii").splitlines()[1:]:
                fields = row.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                count += local_port == port and fields[3] == state and fields[9] in inodes
    return count


@dataclass
class Workers:
    """A running ``om api --workers 2``: its process, port and log."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def serving(self) -> list[int]:
        """The processes listening on the port (not multiprocessing's resource tracker, also a
        child of the supervisor)."""
        return [c for c in _children(self.process.pid) if _sockets(c, self.port, "0A")]

    def wait_for(self, condition: Callable[[list[int]], bool]) -> list[int]:
        """The serving processes, once ``condition`` holds for them."""
        deadline = time.monotonic() + READY_S
        while not condition(found := self.serving()):
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.2)
        return found


@contextlib.contextmanager
def _two_workers(redis_server: EmbeddedRedis, tmp_path: Path) -> Iterator[Workers]:
    """``om api --workers 2`` on a fresh store, stopped with SIGTERM (exit code 0) after."""
    database_url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(database_url)
    port = _free_port()
    settings = env(OM_REDIS_URL=redis_server.url, OM_DATABASE_URL=database_url)
    log = tmp_path / "api.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [*OM, "api", "--port", str(port), "--workers", "2"],
            env=settings,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    try:
        yield Workers(process, port, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 0, log.read_text()


def test_connections_opened_at_once_are_spread_over_both_processes(
    redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    with _two_workers(redis_server, tmp_path) as workers:
        children = workers.wait_for(lambda found: len(found) == 2)  # each on its own socket
        # An agent server's pool: keep-alive connections, opened at once, each used once.
        address = ("127.0.0.1", workers.port)
        with contextlib.ExitStack() as open_connections:
            connections = [
                open_connections.enter_context(socket.create_connection(address, timeout=30))
                for _ in range(32)
            ]
            for connection in connections:
                connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: om\r\n\r\n")
            for connection in connections:
                assert connection.recv(64).startswith(b"HTTP/1.1 200")
            served = [_sockets(child, workers.port, "01") for child in children]
        assert sum(served) == 32 and min(served) > 0, served


def test_a_killed_process_is_started_again_on_its_socket(
    redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    with _two_workers(redis_server, tmp_path) as workers:
        first = workers.wait_for(lambda found: len(found) == 2)
        os.kill(first[0], signal.SIGKILL)
        again = workers.wait_for(lambda found: len(found) == 2 and first[0] not in found)
        assert first[1] in again  # the other one served on meanwhile
        # The new process listens before its app has started: a connection the kernel gives it
        # waits in its backlog until then, which on a loaded machine outlasts one request.
        deadline = time.monotonic() + READY_S
        while not _ready(f"http://127.0.0.1:{workers.port}"):
            assert time.monotonic() < deadline, workers.log.read_text()
            time.sleep(0.2)


def test_the_sockets_share_one_port_and_say_tcp() -> None:
    sockets = reuse_port_sockets("127.0.0.1", 0, 3)
    try:
        ports = {sock.getsockname()[1] for sock in sockets}
        assert len(ports) == 1 and ports != {0}
        for sock in sockets:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
            # asyncio turns Nagle's algorithm off only on connections of a TCP-protocol socket
            assert sock.proto == socket.IPPROTO_TCP
        # A socket without SO_REUSEPORT cannot take the port.
        with pytest.raises(OSError), socket.socket() as other:
            other.bind(("127.0.0.1", ports.pop()))
    finally:
        for sock in sockets:
            sock.close()
