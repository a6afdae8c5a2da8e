"""A fault-injection TCP proxy (standard library only): one local port forwarding to one target.

Blocking sockets and threads: an accept thread, and two pump threads per connection (one each
way). Driven from any thread:

- :meth:`FaultProxy.cut`: every open connection is shut down and the listening socket closed,
  so new connections are refused (``ECONNREFUSED``), as if the target's host went away;
- :meth:`FaultProxy.stall`: connections are still accepted but no byte is forwarded either way
  until :meth:`FaultProxy.restore` (a black hole: clients block on their own timeouts);
- :meth:`FaultProxy.slow`: every chunk waits ``delay_s`` before it is forwarded;
- :meth:`FaultProxy.restore`: back to normal on the same port (listening again after a cut).

Each control call returns once the change is in effect (connections shut, port closed or open
again). A target that refuses the proxy's own connection closes the client's at once.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Final, Literal, Self

Mode = Literal["flowing", "cut", "stalled", "slow"]
HOST: Final = "127.0.0.1"
CHUNK: Final = 64 * 1024
CONNECT_TIMEOUT_S: Final = 5.0


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self._lock = threading.Lock()
        self._open = 2

    def shut(self) -> None:
        """Shut both sockets down (wakes the pumps); idempotent."""
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def pump_done(self) -> bool:
        """Count one finished pump; True for the second (then both sockets are closed)."""
        with self._lock:
            self._open -= 1
            last = self._open == 0
        if last:
            for sock in (self.client, self.upstream):
                sock.close()
        return last


class FaultProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_host:target_port``; see the module docstring.

    ``port`` 0 picks a free port at :meth:`start` (read it from :attr:`port`); after a cut the
    proxy listens on that same port again. Use as a context manager or call :meth:`start` and
    :meth:`close`.
    """

    def __init__(
        self, target_host: str, target_port: int, *, name: str = "proxy", port: int = 0
    ) -> None:
        self.target = (target_host, target_port)
        self.name = name
        self._port = port
        self.mode: Mode = "flowing"
        self.delay_s = 0.0
        self.accepted = 0
        """Client connections accepted so far."""
        self.forwarded_bytes = 0
        self._counting = threading.Lock()
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._closed = False

    @property
    def port(self) -> int:
        """The local port (fixed at the first :meth:`start`)."""
        if not self._port:
            raise RuntimeError(f"{self.name} proxy not started")
        return self._port

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._links)

    # Control -----------------------------------------------------------------------------------

    def start(self) -> Self:
        """Listen and start accepting; returns ``self``."""
        with self._lock:
            if self._listener is not None or self._closed:
                raise RuntimeError(f"{self.name} proxy already started or closed")
            self._listen()
        return self

    def cut(self) -> None:
        """Shut every connection down and refuse new ones until :meth:`restore`."""
        with self._lock:
            self.mode = "cut"
            self._stop_listening()
            links, self._links = self._links, set()
            self._flowing.set()  # a pump waiting on a stall must see its socket shut
        for link in links:
            link.shut()

    def stall(self) -> None:
        """Keep accepting, forward nothing (both directions) until :meth:`restore`."""
        self._set_flow("stalled", 0.0)

    def slow(self, delay_s: float) -> None:
        """Delay every forwarded chunk by ``delay_s`` seconds until :meth:`restore`."""
        if delay_s < 0:
            raise ValueError("delay_s must be >= 0")
        self._set_flow("slow", delay_s)

    def restore(self) -> None:
        """Forward normally again, listening on the same port after a cut."""
        self._set_flow("flowing", 0.0)

    def close(self) -> None:
        """Cut everything for good and stop the accept thread. Safe to call twice."""
        self.cut()
        with self._lock:
            self._closed = True
        self._flowing.set()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _set_flow(self, mode: Mode, delay_s: float) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.name} proxy closed")
            if self._listener is None:
                self._listen()
            self.mode, self.delay_s = mode, delay_s
            if mode == "stalled":
                self._flowing.clear()
            else:
                self._flowing.set()

    # Threads -----------------------------------------------------------------------------------

    def _listen(self) -> None:
        """Bind and listen (the caller holds the lock), then start the accept thread."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((HOST, self._port))
        listener.listen(128)
        self._port = listener.getsockname()[1]
        self._listener = listener
        self._acceptor = threading.Thread(
            target=self._accept_loop, args=(listener,), name=f"proxy-{self.name}", daemon=True
        )
        self._acceptor.start()

    def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            # shutdown wakes the thread blocked in accept(); queued connections are reset.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by a cut
            threading.Thread(
                target=self._connect, args=(client,), name=f"proxy-{self.name}-conn", daemon=True
            ).start()

    def _connect(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT_S)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        link = _Link(client, upstream)
        with self._lock:
            if self.mode == "cut":  # cut while this connection was being set up
                link.shut()
                client.close()
                upstream.close()
                return
            self.accepted += 1
            self._links.add(link)
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(
                target=self._pump,
                args=(link, source, sink),
                name=f"proxy-{self.name}-pump",
                daemon=True,
            ).start()

    def _pump(self, link: _Link, source: socket.socket, sink: socket.socket) -> None:
        """Copy one direction; at end of stream pass the EOF on, on an error shut both."""
        try:
            while data := source.recv(CHUNK):
                self._flowing.wait()
                if self.delay_s > 0:
                    time.sleep(self.delay_s)
                    self._flowing.wait()
                sink.sendall(data)
                with self._counting:  # two pumps per link: += alone may lose one's count
                    self.forwarded_bytes += len(data)
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
        except OSError:
            link.shut()
        finally:
            if link.pump_done():
                with self._lock:
                    self._links.discard(link)
