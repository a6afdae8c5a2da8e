"""``om api --workers N``: N uvicorn processes on one port, each accepting on a socket of its own.

uvicorn's own supervisor hands every process one shared listening socket, and a new
connection goes to whichever process accepts first. An agent server holds a pool of keep-alive
connections and opens them at once: measured with 64 of them and two processes, as often as
not one process took all 64 (the other sat idle) and kept them, so two processes served what
one does (96 against 180 turns/s). Here each process listens on a socket of its own, all bound
to the port with ``SO_REUSEPORT``, and the kernel spreads new connections over the sockets by
their addresses. A process that dies is started again on its socket, whose queue holds the
connections that arrived meanwhile.

Where ``SO_REUSEPORT`` does not exist, uvicorn's supervisor serves the processes as before.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import socket
import threading
from collections.abc import Sequence
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Final

from uvicorn import Config, Server

log = logging.getLogger("uvicorn.error")

WATCH_S: Final = 0.5
"""How often the supervisor looks for a process that died, seconds."""
STARTUP_FAILURE: Final = 3
"""The exit code of a uvicorn server that could not start (its app or socket is broken)."""
STOP_S: Final = 30.0
"""How long a stopping process may take to finish its requests before it is killed, seconds."""


def balancing() -> bool:
    """Whether this system can give each process a socket of its own (``SO_REUSEPORT``)."""
    return hasattr(socket, "SO_REUSEPORT")


def reuse_port_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` TCP sockets bound to ``(host, port)`` with ``SO_REUSEPORT``, not listening yet
    (each process listens on its own); port 0 picks one free port for all of them.

    Raises ``OSError`` when the port is taken (by a socket without ``SO_REUSEPORT``) or the
    address cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            # The protocol named, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only
            # on connections of a socket whose protocol says TCP, and with it on, every
            # answer waited 40 ms for the client's delayed acknowledgement.
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]  # the rest bind the port the first one got
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _serve(config: Config, sock: socket.socket) -> None:
    # A new interpreter (spawn): its logging is set up again, then it serves its socket.
    config.configure_logging()
    Server(config).run(sockets=[sock])


class ApiProcesses:
    """One uvicorn process per socket, each started again on its socket when it dies, all
    stopped on SIGINT or SIGTERM; one that could not start stops them all (it would fail
    again)."""

    def __init__(self, config: Config, sockets: Sequence[socket.socket]) -> None:
        self._config = config
        self._sockets = list(sockets)
        self._processes: list[BaseProcess] = []
        self._stop = threading.Event()
        self.failed = False

    def run(self) -> None:
        """Serve until SIGINT or SIGTERM, or until a process fails to start (``failed``)."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        self._processes = [self._start(sock) for sock in self._sockets]
        while not self._stop.wait(WATCH_S):
            self._replace_dead()
        for process in self._processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: uvicorn finishes what it serves, then exits
        for process in self._processes:
            process.join(STOP_S)
            if process.is_alive():
                process.kill()
                process.join()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info("Received %s, exiting.", signal.Signals(signum).name)
        self._stop.set()

    def _start(self, sock: socket.socket) -> BaseProcess:
        process = multiprocessing.get_context("spawn").Process(
            target=_serve, args=(self._config, sock), daemon=False
        )
        process.start()
        return process

    def _replace_dead(self) -> None:
        for index, process in enumerate(self._processes):
            if self._stop.is_set() or process.is_alive():
                continue
            if process.exitcode == STARTUP_FAILURE:
                log.error("Child process [%s] failed to start, stopping.", process.pid)
                self.failed = True
                self._stop.set()
                return
            log.info("Child process [%s] died; starting another on its socket", process.pid)
            self._processes[index] = self._start(self._sockets[index])


def serve(config: Config, host: str, port: int, workers: int) -> bool:
    """Serve ``config``'s app from ``workers`` processes on ``(host, port)``, balanced (see the
    module's doc) where the system allows, else through uvicorn's supervisor; False when a
    process could not start. Raises ``OSError`` when the port cannot be bound."""
    if not balancing():
        import uvicorn

        uvicorn.run(
            config.app, factory=config.factory, host=host, port=port, workers=workers,
            log_level=config.log_level, access_log=config.access_log,
        )  # fmt: skip
        return True
    sockets = reuse_port_sockets(host, port, workers)
    try:
        processes = ApiProcesses(config, sockets)
        processes.run()
        return not processes.failed
    finally:
        for sock in sockets:
            sock.close()
