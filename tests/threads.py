"""Threads for tests: one whose failure reaches the test (an assertion or error raised inside
it is raised again in the thread that joins it; pytest would otherwise only warn, and a test
waiting on the thread's progress would wait for its deadline), and the thread of a local
server that a test talks to."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

SHUTDOWN_POLL_S = 0.05
"""How often a test server's loop looks for ``shutdown()``, seconds: socketserver's default
(0.5 s) was paid by every teardown of every fixture that runs a server."""


class CheckedThread(threading.Thread):
    """Runs ``target(*args)``; :meth:`join` and :meth:`raise_failure` re-raise what it raised."""

    def __init__(self, target: Callable[..., object], *args: object) -> None:
        super().__init__(daemon=True)
        self._work = target
        self._work_args = args
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self._work(*self._work_args)
        except BaseException as error:  # handed to the joining thread, never swallowed
            self.failure = error

    def raise_failure(self) -> None:
        """Raise what the thread raised, if it has failed (it may still be running)."""
        if self.failure is not None:
            raise self.failure

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread; raise what it raised, or ``AssertionError`` when it is still
        running after ``timeout`` seconds."""
        super().join(timeout)
        if self.is_alive():
            raise AssertionError(f"{self.name} still runs after {timeout} s")
        self.raise_failure()


@contextmanager
def serving(server: socketserver.BaseServer, name: str | None = None) -> Iterator[None]:
    """Serve ``server`` from a daemon thread until the block ends; then shut it down, close its
    socket and wait for the thread (5 s at most)."""
    thread = threading.Thread(
        target=server.serve_forever, args=(SHUTDOWN_POLL_S,), name=name, daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
