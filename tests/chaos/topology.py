"""The chaos topology: :class:`tests.deploy.rehearsal.Rehearsal` (the compose services as local
processes) with a fault proxy in front of PostgreSQL, the private Redis and the broker, and a
switchable OpenAI-compatible provider (:mod:`tests.chaos.provider`).

Every om service gets URLs of the proxies, never of the servers; the harness reads the store
and Redis directly. :class:`Profile` holds the settings and timings of a run: ``FULL`` keeps
the product defaults where the faults matter (lock TTL, reconcile interval, time limits and
visibility timeout derived), ``SHORT`` shortens them for ``make test``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from om_workers.config import Settings
from om_workers.store import AccountStore, SqlStore
from tests.chaos.provider import ProviderServer
from tests.chaos.proxy import FaultProxy
from tests.deploy.rehearsal import (
    HOST,
    OVERRIDES,
    READY_TIMEOUT_S,
    Config,
    Rehearsal,
    _Process,
    _signal_group,
)
from tests.deploy.topology import ComposeService
from tests.e2e.support import LOW

Broker = Literal["redis", "amqp"]
TENANTS: Final = ("tenant-a", "tenant-b")
REHEARSAL_TIMINGS: Final = tuple(k for k in OVERRIDES if k.endswith("_S"))
"""The rehearsal's shortened timings, dropped so a profile's own (or the defaults) apply."""
_TASK = re.compile(r"Task om\.flush\[([0-9a-f-]+)\] (\w+)")


@dataclass(frozen=True)
class Profile:
    """Settings, sizes and timings (seconds) of one chaos run."""

    name: str
    settings: dict[str, str]
    lock_ttl_s: float
    reconcile_interval_s: float
    workers: int = 3
    concurrency: int = 4
    sessions_per_tenant: int = 4
    threads: int = 4
    pause_s: float = 1.0
    warmup_s: float = 8.0
    outage_s: float = 30.0
    redis_down_s: float = 1.0
    beat_down_s: float = 30.0
    provider_fault_s: float = 15.0
    provider_delay_s: float = 0.5
    provider_hang_s: float = 15.0
    heal_timeout_s: float = 300.0
    grace_s: float = 3.0
    give_up_s: float = 60.0
    poll_s: float = 0.5


FULL: Final = Profile(
    name="full",
    # Product defaults for lock TTL (60 s), reconcile interval (60 s) and the derived time
    # limits; only the provider HTTP timeout is shorter, so a hanging provider costs 30 s a job.
    settings={"OM_HTTP_TIMEOUT_S": "10"},
    lock_ttl_s=Settings().locks.ttl_s,
    reconcile_interval_s=Settings().delivery.reconcile_interval_s,
)
SHORT: Final = Profile(
    name="short",
    settings={
        "OM_LOCK_TTL_S": "2",
        "OM_RECONCILE_INTERVAL_S": "1",
        "OM_HTTP_TIMEOUT_S": "1",
        "OM_SOFT_TIME_LIMIT_S": "3",
        "OM_HARD_TIME_LIMIT_S": "4",
        "OM_VISIBILITY_TIMEOUT_S": "6",
        "OM_PROVIDER_MAX_ATTEMPTS": "2",
        "OM_BACKOFF_BASE_S": "0.1",
        "OM_BACKOFF_CAP_S": "0.5",
    },
    lock_ttl_s=2.0,
    reconcile_interval_s=1.0,
    concurrency=2,
    sessions_per_tenant=2,
    threads=2,
    pause_s=0.3,
    warmup_s=1.5,
    outage_s=2.0,
    redis_down_s=0.5,
    beat_down_s=1.5,
    provider_fault_s=0.6,
    provider_delay_s=0.2,
    provider_hang_s=3.0,
    heal_timeout_s=40.0,
    grace_s=2.0,
    give_up_s=20.0,
    poll_s=0.2,
)


class ChaosTopology(Rehearsal):
    """The rehearsal topology behind proxies; :meth:`start`, the fault helpers, :meth:`stop`.

    ``keys`` holds one API key per tenant of :data:`TENANTS` once started; ``kills`` the wall
    times (UTC) of every SIGKILL it sent.
    """

    def __init__(
        self,
        profile: Profile,
        broker: Broker = "redis",
        say: Callable[[str], None] = lambda _m: None,
    ) -> None:
        config = Config(workers=profile.workers, concurrency=profile.concurrency, kill=None)
        super().__init__(config, say=say)
        self.profile = profile
        self.broker = broker
        self.keys: dict[str, str] = {}
        self.kills: list[datetime] = []
        self.provider = ProviderServer(
            delay_s=profile.provider_delay_s, hang_s=profile.provider_hang_s
        )
        self.provider_key = f"sk-chaos-{secrets.token_hex(16)}"
        self.pg_proxy = FaultProxy(HOST, 5432, name="postgres")
        self.redis_proxy: FaultProxy | None = None
        self.broker_proxy: FaultProxy | None = None
        self.broker_url: str | None = None
        self._vhost = contextlib.ExitStack()
        self._starting: set[str] = set()
        self.lock = threading.RLock()
        """Held while a service is stopped or started on purpose (the supervisor waits)."""
        self.expected_down: set[str] = set()
        """Services stopped on purpose, which the supervisor leaves alone."""

    # Starting ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Provider, proxies, (RabbitMQ virtual host,) then the rehearsal's start and one API
        key per tenant. Raises what :meth:`Rehearsal.start` raises."""
        self.provider.start()
        self.pg_proxy.start()
        if self.broker == "amqp":
            from tests.e2e.rabbitmq import AMQP_PORT, fresh_vhost

            direct = self._vhost.enter_context(fresh_vhost())
            self.broker_proxy = FaultProxy(HOST, AMQP_PORT, name="rabbitmq").start()
            self.broker_url = direct.replace(f":{AMQP_PORT}/", f":{self.broker_proxy.port}/")
        super().start()
        store = self.store()  # what `om keys create` does, without two more interpreters
        try:
            accounts = AccountStore(store.engine)
            for tenant in TENANTS:
                accounts.create_tenant(tenant)
                self.keys[tenant] = accounts.create_api_key(tenant, label="chaos").plaintext
        finally:
            store.close()

    def environment(self, service: ComposeService, **extra: str) -> dict[str, str]:
        """The rehearsal's environment with the proxies' URLs, the profile's settings (the
        rehearsal's shortened timings dropped) and the chaos provider."""
        env = super().environment(service, **extra)
        assert self.redis is not None and self.database is not None
        if self.redis_proxy is None:
            self.redis_proxy = FaultProxy(HOST, self.redis.port, name="redis").start()
        if "OM_DATABASE_URL" in env:
            port = self.pg_proxy.port
            env["OM_DATABASE_URL"] = f"postgresql+psycopg://postgres@{HOST}:{port}/{self.database}"
        if "OM_REDIS_URL" in env:
            env["OM_REDIS_URL"] = f"redis://{HOST}:{self.redis_proxy.port}/0"
            if self.broker_url is not None:
                env["OM_BROKER_URL"] = self.broker_url
        for key in REHEARSAL_TIMINGS:
            env.pop(key, None)
        env.update(self.profile.settings)
        env.update(
            OM_PROVIDER="openai",
            OM_MODEL="chaos-model",
            OM_PROVIDER_BASE_URL=self.provider.url,
            OM_PROVIDER_API_KEY=self.provider_key,
            OM_SETTINGS_JSON=json.dumps(LOW),
        )
        return env

    def healthcheck(self, process: _Process) -> subprocess.CompletedProcess[str]:
        """The image's check; with RabbitMQ a worker is pinged through the broker, which the
        check does not know yet (it pings through ``OM_REDIS_URL``: see the report)."""
        if self.broker_url is not None and process.name.startswith("worker"):
            env = {**process.env, "OM_REDIS_URL": self.broker_url}
            process = dataclasses.replace(process, env=env)
        return super().healthcheck(process)

    # Faults ------------------------------------------------------------------------------------

    def workers(self) -> list[str]:
        return [p.name for p in self.processes if p.name.startswith("worker")]

    def in_flight(self, name: str) -> int:
        """``om.flush`` tasks the worker's log shows received and not yet finished."""
        last: dict[str, str] = {}
        text = self.process(name).log.read_text(errors="replace")
        for task_id, event in _TASK.findall(text):
            last[task_id] = event
        return sum(1 for event in last.values() if event == "received")

    def busy_worker(self, timeout_s: float) -> tuple[str, int]:
        """The worker with the most flushes in flight (waits up to ``timeout_s`` for one)."""
        deadline = time.monotonic() + timeout_s
        while True:
            busy = max(((self.in_flight(n), n) for n in self.workers()), default=(0, ""))
            if busy[0] > 0 or time.monotonic() > deadline:
                return busy[1] or self.workers()[0], busy[0]
            time.sleep(0.05)

    def kill(self, name: str) -> int:
        """SIGKILL the process's group (a crash); returns its pid. A worker's kill time is kept.
        It stays down (the supervisor leaves it) until :meth:`respawn`."""
        with self.lock:
            self.expected_down.add(name)
            process = self.process(name).process
            if name.startswith("worker"):
                self.kills.append(datetime.now(UTC))
            _signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
            return process.pid

    def terminate(self, name: str) -> int:
        """SIGTERM the process (a graceful stop) and wait for it; returns its pid. It stays down
        until :meth:`respawn`."""
        with self.lock:
            self.expected_down.add(name)
            process = self.process(name).process
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            return process.pid

    def respawn(self, name: str, *, wait: bool = True) -> None:
        """Start the (stopped) service again with the same command and environment, as a
        supervisor would; with ``wait``, until its health check passes."""
        with self.lock:
            old = self.process(name)
            self.processes.remove(old)
            self._spawn(name, old.argv, old.env)
            self._starting.add(name)
            self.expected_down.discard(name)
        if wait:
            self.settle_services()

    def settle_services(self) -> None:
        """Wait until every service restarted since the last call passes its health check."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            with self.lock:
                if not self._starting:
                    return
                name = self._starting.pop()
            self._wait_healthy(self.process(name), deadline)

    def restart_redis(self, down_s: float) -> None:
        """Stop the private Redis and start it empty on the same port after ``down_s``."""
        assert self.redis is not None
        self.redis.stop()
        time.sleep(down_s)
        self.redis.start()

    def store(self) -> SqlStore:
        """The store over a direct connection (not the proxy); close it after use."""
        return SqlStore.from_url(self.database_url)

    @property
    def redis_url(self) -> str:
        """The private Redis, directly."""
        assert self.redis is not None
        return self.redis.url

    # Stopping ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """The rehearsal's stop (processes, Redis, database, logs), then proxies, provider and
        the RabbitMQ virtual host. Safe to call twice."""
        try:
            super().stop()
        finally:
            for proxy in (self.pg_proxy, self.redis_proxy, self.broker_proxy):
                if proxy is not None:
                    proxy.close()
            self.provider.close()
            self._vhost.close()
