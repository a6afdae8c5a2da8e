"""The embedded stack behind ``om up`` and ``om demo``: one Redis, one store, four processes.

:class:`Stack` runs, as child processes, exactly the commands a deployment runs
(``om api``, ``om worker``, ``om beat``, ``om flower``), against the Redis on ``OM_REDIS_URL``
or a private :class:`~om_workers.coordination.embedded.EmbeddedRedis`, and a database migrated first
(SQLite by default). It waits until each answers (API ``/readyz``, a Celery ping of the worker,
Flower ``/healthcheck``), creates a dev tenant and API key in the store (its own
:func:`~om_workers.services.build_services` on the URLs the children get), and stops everything
by pid when it leaves.

No orphans: every child leads its own process group (``start_new_session``), so stopping
signals the group, which also reaches anything a child forked; on Linux each child also gets
``PR_SET_PDEATHSIG`` so it is terminated should this process die without running its cleanup
(``kill -9``). Everything binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import httpx

from om_core.errors import ObservationalMemoryError
from om_workers.config import Settings
from om_workers.coordination.embedded import EmbeddedRedis, free_port
from om_workers.errors import TenantExistsError
from om_workers.services import build_services
from om_workers.store import AccountStore, upgrade

HOST: Final = "127.0.0.1"
DEV_TENANT: Final = "dev"
READY_TIMEOUT_S: Final = 60.0
"""How long :meth:`Stack.start` waits for each component (cold imports on a slow CI core)."""
STOP_TIMEOUT_S: Final = 20.0
"""How long a child gets after SIGTERM (a worker's warm shutdown finishes its task) before
SIGKILL."""
WORKER_NODE: Final = "om-worker@%h"

_PR_SET_PDEATHSIG: Final = 1


class StackError(ObservationalMemoryError, RuntimeError):
    """A component of the stack could not start, or died; the message quotes its log."""


@dataclass(frozen=True)
class StackConfig:
    """What to run. Port 0 means "a free port"; ``redis_url`` ``None`` means a private Redis.

    ``env`` is added to every child's environment (``OM_SETTINGS_JSON``, ``OM_PROVIDER``...).
    """

    database_url: str
    redis_url: str | None = None
    host: str = HOST
    api_port: int = 8000
    flower_port: int = 5555
    flower_basic_auth: str | None = None
    beat: bool = True
    flower: bool = True
    env: Mapping[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    ready_timeout_s: float = READY_TIMEOUT_S


@dataclass(frozen=True)
class StackInfo:
    """Where the running stack answers, and the dev credentials it made."""

    api_url: str
    flower_url: str | None
    flower_basic_auth: str | None
    redis_url: str
    database_url: str
    tenant_id: str
    api_key: str
    pids: Mapping[str, int]
    log_dir: Path


@dataclass
class _Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


def generate_basic_auth() -> str:
    """A ``user:password`` pair for Flower when ``OM_FLOWER_BASIC_AUTH`` is unset (dev only)."""
    return f"om:{secrets.token_urlsafe(18)}"


def port_in_use(host: str, port: int) -> bool:
    """Whether a TCP listener on ``host:port`` would fail to bind because the port is taken.

    Binds the way uvicorn and Flower do (``SO_REUSEADDR``), so a port left in TIME_WAIT by an
    earlier run counts as free, as it is for them. An address this machine does not have is
    not "in use": the child reports that itself."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def taken_port(config: StackConfig) -> tuple[str, int] | None:
    """The first fixed port of ``config`` that is already in use, as ``("API" | "Flower",
    port)``; ``None`` when all are free. Port 0 (any free port) is never taken. Checked before
    anything starts, so a taken port costs no Redis, migration or child process; another
    program may still take a port between this check and the child's bind (the child then
    exits and :meth:`Stack.start` quotes its log)."""
    wanted = [("API", config.api_port)]
    if config.flower:
        wanted.append(("Flower", config.flower_port))
    for name, port in wanted:
        if port and port_in_use(config.host, port):
            return name, port
    return None


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: ask the kernel to SIGTERM it when the parent
    # dies, so a killed `om up` never leaves a worker consuming from a vanished broker.
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class Stack:
    """The embedded stack; use as a context manager or call :meth:`start` / :meth:`stop`.

    :meth:`start` raises :class:`StackError` when a component exits or does not become ready
    within ``ready_timeout_s`` (everything already started is stopped first), and whatever
    :class:`~om_workers.coordination.embedded.EmbeddedRedis` or the store's ``upgrade`` raise.
    """

    def __init__(self, config: StackConfig, *, say: Callable[[str], None] | None = None) -> None:
        self._config = config
        self._say = say or (lambda _message: None)
        self._children: list[_Child] = []
        self._redis: EmbeddedRedis | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._info: StackInfo | None = None

    @property
    def info(self) -> StackInfo:
        """The running stack's addresses. Raises :class:`StackError` before :meth:`start`."""
        if self._info is None:
            raise StackError("the stack is not running")
        return self._info

    def start(self) -> StackInfo:
        """Start Redis (unless configured), migrate, start the children, wait for each.

        Raises :class:`StackError` when this stack was started already (a second set of
        processes would outlive :meth:`stop`, which knows only the last)."""
        if self._info is not None:
            raise StackError("the stack is already running: stop it before starting it again")
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> StackInfo:
        config = self._config
        if config.log_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="om-stack-")
            log_dir = Path(self._tmp.name)
        else:
            log_dir = config.log_dir
            log_dir.mkdir(parents=True, exist_ok=True)

        redis_url = config.redis_url
        if not redis_url:
            self._redis = EmbeddedRedis()
            self._redis.start()
            redis_url = self._redis.url
            self._say(f"redis   private redis-server on {redis_url} (pid {self._redis.pid})")
        else:
            self._say(f"redis   {_redact_url(redis_url)}")

        upgrade(config.database_url)
        self._say(f"db      migrated {_redact_url(config.database_url)}")
        # The children build theirs from the same two URLs (OM_DATABASE_URL, OM_REDIS_URL).
        services = build_services(Settings(database_url=config.database_url, redis_url=redis_url))
        try:
            tenant_id, api_key = create_dev_key(services.accounts)
        finally:
            services.close()

        api_port = config.api_port or free_port()
        env = dict(os.environ)
        env.update(config.env)
        env.update(OM_REDIS_URL=redis_url, OM_DATABASE_URL=config.database_url)
        basic_auth = None
        flower_url = None

        # The worker starts first: its imports are the slowest, and it overlaps the others'.
        self._spawn("worker", ["worker"], env, log_dir)
        self._spawn("api", ["api", "--host", config.host, "--port", str(api_port)], env, log_dir)
        if config.beat:
            self._spawn("beat", ["beat"], env, log_dir)
        if config.flower:
            flower_port = config.flower_port or free_port()
            basic_auth = config.flower_basic_auth or generate_basic_auth()
            flower_env = dict(env, OM_FLOWER_BASIC_AUTH=basic_auth)
            args = ["flower", "--host", config.host, "--port", str(flower_port)]
            self._spawn("flower", args, flower_env, log_dir)
            flower_url = f"http://{config.host}:{flower_port}"

        api_url = f"http://{config.host}:{api_port}"
        deadline = time.monotonic() + config.ready_timeout_s
        self._wait("api", deadline, lambda: _http_ok(f"{api_url}/readyz"))
        self._say(f"api     ready at {api_url}")
        # The worker consumes from OM_BROKER_URL when set (RabbitMQ), else from the Redis.
        broker_url = env.get("OM_BROKER_URL") or redis_url
        self._wait("worker", deadline, lambda: _worker_answers(broker_url))
        self._say("worker  ready (answers a Celery ping)")
        if flower_url is not None:
            self._wait("flower", deadline, lambda: _http_ok(f"{flower_url}/healthcheck"))
            self._say(f"flower  ready at {flower_url}")
        self.check_alive()
        self._info = StackInfo(
            api_url=api_url,
            flower_url=flower_url,
            flower_basic_auth=basic_auth,
            redis_url=redis_url,
            database_url=config.database_url,
            tenant_id=tenant_id,
            api_key=api_key,
            pids=self.pids(),
            log_dir=log_dir,
        )
        return self._info

    def pids(self) -> dict[str, int]:
        """Process ids of the running children (and the private Redis), by component."""
        pids = {c.name: c.process.pid for c in self._children if c.process.poll() is None}
        if self._redis is not None and self._redis.pid is not None:
            pids["redis"] = self._redis.pid
        return pids

    def check_alive(self) -> None:
        """Raise :class:`StackError` (quoting its log) if any child, or the private Redis,
        has exited."""
        for child in self._children:
            code = child.process.poll()
            if code is not None:
                raise StackError(f"{child.name} exited with {code}: {_tail(child.log)}")
        if self._redis is not None and self._redis.pid is None:
            raise StackError("the private redis-server exited: the worker cannot go on")

    def _spawn(self, name: str, args: list[str], env: Mapping[str, str], log_dir: Path) -> None:
        log = log_dir / f"{name}.log"
        command = [sys.executable, "-m", "om_api.cli", *args]
        with log.open("ab") as out:
            process = subprocess.Popen(
                command,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        self._children.append(_Child(name, process, log))

    def _wait(self, name: str, deadline: float, ready: Callable[[], bool]) -> None:
        child = next(c for c in self._children if c.name == name)
        while True:
            if child.process.poll() is not None:
                code = child.process.returncode
                raise StackError(f"{name} exited with {code}: {_tail(child.log)}")
            if ready():
                return
            if time.monotonic() >= deadline:
                timeout = self._config.ready_timeout_s
                raise StackError(f"{name} not ready within {timeout} s: {_tail(child.log)}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop every child (SIGTERM to its process group, SIGKILL after
        :data:`STOP_TIMEOUT_S`), then the private Redis, then delete the temporary log directory.
        Safe to call twice; never raises for a process that already exited."""
        children, self._children = self._children, []
        # Signal all first, then wait: shutdowns overlap instead of adding up.
        for child in reversed(children):
            _signal_group(child.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in reversed(children):
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child.process.pid, signal.SIGKILL)
                # A process in an uninterruptible wait dies when that wait ends; stopping the
                # stack does not wait for it forever (the kernel reaps it then).
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.process.wait(timeout=STOP_TIMEOUT_S)
            # Anything the child forked and left behind in its group goes with it.
            _signal_group(child.process.pid, signal.SIGKILL)
        redis_server, self._redis = self._redis, None
        if redis_server is not None:
            redis_server.stop()
        tmp, self._tmp = self._tmp, None
        if tmp is not None:
            tmp.cleanup()
        self._info = None

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


def create_dev_key(accounts: AccountStore, tenant_id: str = DEV_TENANT) -> tuple[str, str]:
    """Create ``tenant_id`` in ``accounts`` if it does not exist and a new API key for it.

    Returns ``(tenant_id, plaintext key)``; the key is not stored in plaintext anywhere.
    Raises the store's errors (``StoreUnavailableError`` ...) when the database is unusable.
    The caller owns (and closes) the store.
    """
    with contextlib.suppress(TenantExistsError):
        accounts.create_tenant(tenant_id)
    return tenant_id, accounts.create_api_key(tenant_id, label="om dev key").plaintext


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _worker_answers(broker_url: str) -> bool:
    # A ping through the broker proves the worker consumes from it, not merely that it runs.
    from celery import Celery  # type: ignore[import-untyped]

    app: Any = Celery("om-stack-probe", broker=broker_url, set_as_current=False)
    try:
        # The first reply ends the wait; without a limit every ping waits out its timeout.
        replies = app.control.ping(timeout=1.0, limit=1)
    except Exception:  # any broker hiccup while starting means "not yet"
        return False
    finally:
        app.close()
    return any(any(name.startswith("om-worker@") for name in reply) for reply in replies)


def _redact_url(url: str) -> str:
    # Show where, never the password.
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, location = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{location}" if ":" in credentials else url


def _tail(log: Path, lines: int = 15) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.strip().splitlines()[-lines:]) or "(empty log)"
