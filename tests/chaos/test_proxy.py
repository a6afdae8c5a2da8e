"""The fault-injection proxy against a tiny echo server: forwarding, cut, stall, slow, restore."""

from __future__ import annotations

import socket
import socketserver
import time
from collections.abc import Iterator

import pytest

from tests.chaos.proxy import FaultProxy
from tests.redis.helpers import wait_until
from tests.threads import serving


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def echo() -> Iterator[int]:
    server = _EchoServer(("127.0.0.1", 0), _Echo)
    with serving(server):
        yield server.server_address[1]


@pytest.fixture
def proxy(echo: int) -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", echo, name="echo") as started:
        yield started


def _connect(proxy: FaultProxy, timeout_s: float = 30.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout_s)


def _roundtrip(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    received = b""
    while len(received) < len(payload):
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def _closed(sock: socket.socket) -> bool:
    """True when the peer closed or reset the connection (within the socket's timeout)."""
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_forwards_both_ways_on_several_connections(proxy: FaultProxy) -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
    with _connect(proxy) as a, _connect(proxy) as b:
        assert _roundtrip(a, b"hello") == b"hello"
        assert _roundtrip(b, payload) == payload
    assert proxy.accepted == 2
    # A pump counts a chunk after passing it on, so the count may trail what arrived.
    assert wait_until(lambda: proxy.forwarded_bytes >= 2 * (len(payload) + 5), timeout_s=60)


def test_cut_aborts_connections_refuses_new_ones_and_restore_reopens_the_port(
    proxy: FaultProxy,
) -> None:
    port = proxy.port
    sock = _connect(proxy)
    assert _roundtrip(sock, b"before") == b"before"
    proxy.cut()
    assert _closed(sock)
    sock.close()
    with pytest.raises(ConnectionRefusedError):
        _connect(proxy)
    assert proxy.open_connections == 0
    proxy.restore()
    assert proxy.port == port
    with _connect(proxy) as again:
        assert _roundtrip(again, b"after") == b"after"


def test_stall_accepts_but_forwards_nothing_until_restore(proxy: FaultProxy) -> None:
    with _connect(proxy, timeout_s=30) as old:
        assert _roundtrip(old, b"x") == b"x"
        proxy.stall()
        old.settimeout(0.3)  # a stalled proxy never answers: the timeout only ends the wait
        old.sendall(b"held")
        with pytest.raises(TimeoutError):
            old.recv(16)
        with _connect(proxy, timeout_s=30) as new:  # accepted while stalled
            new.settimeout(0.3)
            new.sendall(b"new")
            with pytest.raises(TimeoutError):
                new.recv(16)
            proxy.restore()
            new.settimeout(30)
            assert new.recv(16) == b"new"
        old.settimeout(30)
        assert old.recv(16) == b"held"


def test_slow_delays_every_chunk_and_keeps_the_bytes(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        proxy.slow(0.2)
        began = time.monotonic()
        assert _roundtrip(sock, b"slowly") == b"slowly"
        took = time.monotonic() - began
        proxy.slow(10.0)
        proxy.restore()
        sock.settimeout(60)
        began = time.monotonic()
        assert _roundtrip(sock, b"fast") == b"fast"
        fast = time.monotonic() - began
    assert took >= 0.4, took  # one delay each way (a sleep is never shorter)
    # Restored: no 10 s delay each way, however slowly a loaded machine forwards.
    assert fast < 10.0, fast


def test_an_unreachable_target_closes_the_client_connection() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]  # bound, never listening: connections refused
        with FaultProxy("127.0.0.1", dead_port, name="dead") as proxy, _connect(proxy) as sock:
            assert _closed(sock)


def test_close_ends_everything_and_is_idempotent(echo: int) -> None:
    proxy = FaultProxy("127.0.0.1", echo, name="closing").start()
    sock = _connect(proxy)
    proxy.close()
    proxy.close()
    assert _closed(sock)
    sock.close()
