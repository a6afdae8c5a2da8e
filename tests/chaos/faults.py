"""The fault matrix: each :class:`Fault` injects one failure into a running
:class:`~tests.chaos.topology.ChaosTopology`, holds it, ends it, and says what it did.

A fault returns an :class:`Injected`: its wall-clock start and end (the end is the kill itself
for a crash) and whether API errors are expected meanwhile (``outage``: 503s, refused
connections). *Quiet* faults (the provider's) run with the load paused: one agent run per
session is made under the fault, so each session meets it about once (the reconciler backs
a session off for a minute once its last three jobs failed; see the notes of the report).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from sqlalchemy import create_engine, text

from tests.chaos.provider import Mode
from tests.chaos.proxy import FaultProxy
from tests.chaos.topology import Broker, ChaosTopology, Profile


@dataclass(frozen=True)
class Injected:
    """What a fault did: a description, its wall-clock start and end (``time.time()``) and
    whether API errors are expected between them (plus the profile's grace). A fault of
    several outages gives each one's (start, end) in ``windows``: errors are expected in those
    only, not between them. ``in_flight`` counts the flushes running when each blow fell."""

    description: str
    start: float
    end: float
    outage: bool
    windows: tuple[tuple[float, float], ...] = ()
    in_flight: tuple[int, ...] = ()


@dataclass(frozen=True)
class FaultContext:
    """What a fault acts on; ``burst`` makes one agent run on every session of the phase."""

    topology: ChaosTopology
    profile: Profile
    burst: Callable[[], None]


@dataclass(frozen=True)
class Fault:
    """One row of the matrix. ``target`` gives the heal-time target in seconds for a profile
    and broker (``None``: no target); ``brokers`` the broker legs it runs in."""

    slug: str
    title: str
    kind: str
    inject: Callable[[FaultContext], Injected]
    quiet: bool = False
    target: Callable[[Profile, Broker], float | None] = lambda _p, _b: None
    target_text: str = ""
    brokers: tuple[Broker, ...] = ("redis", "amqp")


def _worker_kill(ctx: FaultContext) -> Injected:
    topology = ctx.topology
    name, flights = topology.busy_worker(timeout_s=10 + ctx.profile.warmup_s)
    at = time.time()
    pid = topology.kill(name)
    topology.respawn(name, wait=False)  # a supervisor restarts it; healing does not wait on it
    return Injected(
        f"SIGKILL {name} (pid {pid}) with {flights} flush(es) in flight; restarted", at, at, False
    )


def _redis_restart(ctx: FaultContext) -> Injected:
    at = time.time()
    ctx.topology.restart_redis(ctx.profile.redis_down_s)
    end = time.time()
    return Injected(
        f"Redis stopped, started empty on its port ({end - at:.1f} s down)", at, end, True
    )


REDIS_RESTARTS: Final = 5
"""How many times :data:`REDIS_RESTARTS_FAULT` restarts Redis."""


def _redis_restarts(ctx: FaultContext) -> Injected:
    """Redis stopped and started empty :data:`REDIS_RESTARTS` times while the load runs, each
    time once a flush that started after the previous restart is running (its job row says
    ``running``: a worker is inside the task), so every restart meets a task in flight."""
    topology, profile = ctx.topology, ctx.profile
    wait_s = min(60.0, profile.heal_timeout_s)
    engine = create_engine(topology.database_url)
    windows: list[tuple[float, float]] = []
    in_flight: list[int] = []
    logs = {name: topology.process(name).log for name in topology.workers()}
    offsets = {name: log.stat().st_size for name, log in logs.items()}
    since = datetime.now(UTC)
    try:
        for _ in range(REDIS_RESTARTS):
            in_flight.append(_running_since(engine, since, wait_s))
            at = time.time()
            topology.restart_redis(profile.redis_down_s)
            windows.append((at, time.time()))
            since = datetime.now(UTC)
    finally:
        engine.dispose()
    down = max(end - start for start, end in windows)
    flights = ", ".join(str(n) for n in in_flight)
    # What the workers saw (their logs are appended to, a respawned worker's too).
    seen = "".join(_read_from(log, offsets[name]) for name, log in logs.items())
    return Injected(
        f"Redis stopped and started empty {REDIS_RESTARTS} times under load (at most "
        f"{down:.1f} s down), flushes running at each restart: {flights}; the workers "
        f"logged {seen.count(CONNECTION_LOST)} lost broker connections and restored unacked "
        f"messages {seen.count(RESTORING)} times",
        windows[0][0],
        windows[-1][1],
        True,
        windows=tuple(windows),
        in_flight=tuple(in_flight),
    )


CONNECTION_LOST: Final = "Connection to broker lost"
"""What a Celery worker logs when its broker connection drops."""
RESTORING: Final = "unacknowledged message(s)"
"""What kombu logs when it puts a worker's unacked messages back (``Restoring N ...``): the
step that killed workers when Redis restarted under them."""


def _read_from(log: Path, offset: int) -> str:
    with log.open("rb") as handle:
        handle.seek(offset)
        return handle.read().decode(errors="replace")


def _running_since(engine: Any, since: datetime, timeout_s: float) -> int:
    """Flush jobs ``running`` that started at or after ``since``, once there is one (polled
    every 50 ms); 0 when none within ``timeout_s``."""
    query = text("SELECT count(*) FROM flush_jobs WHERE state = 'running' AND started_at >= :since")
    deadline = time.monotonic() + timeout_s
    while True:
        with engine.connect() as connection:
            running = int(connection.execute(query, {"since": since}).scalar_one())
        if running or time.monotonic() > deadline:
            return running
        time.sleep(0.05)


def _broker_cut(ctx: FaultContext) -> Injected:
    topology = ctx.topology
    proxy = topology.broker_proxy or topology.redis_proxy
    assert proxy is not None
    what = "RabbitMQ" if topology.broker_proxy else "Redis (broker, locks, markers)"
    return _cut(proxy, ctx.profile.outage_s, f"{what} unreachable: proxy cut")


def _postgres_cut(ctx: FaultContext) -> Injected:
    return _cut(ctx.topology.pg_proxy, ctx.profile.outage_s, "PostgreSQL unreachable: proxy cut")


def _cut(proxy: FaultProxy, hold_s: float, what: str) -> Injected:
    at = time.time()
    proxy.cut()
    time.sleep(hold_s)
    proxy.restore()
    end = time.time()
    return Injected(f"{what} for {end - at:.1f} s", at, end, True)


def _api_restart(ctx: FaultContext) -> Injected:
    at = time.time()
    pid = ctx.topology.kill("api")
    ctx.topology.respawn("api", wait=True)
    end = time.time()
    return Injected(f"SIGKILL api (pid {pid}), restarted: {end - at:.1f} s down", at, end, True)


def _beat_restart(ctx: FaultContext) -> Injected:
    at = time.time()
    pid = ctx.topology.terminate("beat")
    time.sleep(ctx.profile.beat_down_s)
    ctx.topology.respawn("beat", wait=True)
    end = time.time()
    return Injected(f"SIGTERM beat (pid {pid}), restarted after {end - at:.1f} s", at, end, False)


def _provider(mode: Mode, label: str) -> Callable[[FaultContext], Injected]:
    def inject(ctx: FaultContext) -> Injected:
        provider = ctx.topology.provider
        before = provider.calls[mode]
        at = time.time()
        provider.mode = mode
        ctx.burst()
        time.sleep(ctx.profile.provider_fault_s)
        provider.mode = "ok"
        end = time.time()
        calls = provider.calls[mode] - before
        return Injected(f"provider {label} for {end - at:.1f} s ({calls} calls)", at, end, False)

    return inject


def _kill_target(profile: Profile, broker: Broker) -> float:
    return 10.0 if broker == "amqp" else profile.lock_ttl_s + profile.reconcile_interval_s


REDIS: Final[tuple[Broker, ...]] = ("redis",)
"""Faults whose path does not touch the broker run on the Redis leg only."""

MATRIX: Final = (
    Fault(
        "worker-kill",
        "worker killed mid-flush",
        "process",
        _worker_kill,
        target=_kill_target,
        target_text="Redis broker: lock TTL + reconcile interval; RabbitMQ: 10 s",
    ),
    Fault("redis-restart", "Redis restarted empty", "state", _redis_restart),
    Fault("broker-cut", "broker unreachable", "network", _broker_cut),
    Fault(
        "postgres-cut",
        "PostgreSQL unreachable",
        "network",
        _postgres_cut,
        target=lambda _p, _b: 60.0,
        target_text="healed within a minute of its return; 503 + Retry-After meanwhile",
    ),
    Fault("api-restart", "API killed and restarted", "service", _api_restart, brokers=REDIS),
    Fault("beat-restart", "beat stopped and restarted", "service", _beat_restart, brokers=REDIS),
    Fault(
        "provider-500",
        "provider 500s",
        "provider",
        _provider("error_500", "500s quoting the authorization header"),
        quiet=True,
        brokers=REDIS,
    ),
    Fault(
        "provider-429",
        "provider 429 + Retry-After",
        "provider",
        _provider("rate_limit_429", "429 with Retry-After: 1"),
        quiet=True,
        brokers=REDIS,
    ),
    Fault(
        "provider-timeout",
        "provider timeouts",
        "provider",
        _provider("timeout", "not answering"),
        quiet=True,
        brokers=REDIS,
    ),
    Fault(
        "provider-malformed",
        "provider malformed tool calls",
        "provider",
        _provider("malformed", "tool calls with non-JSON arguments"),
        quiet=True,
        brokers=REDIS,
    ),
    Fault(
        "provider-echo-key",
        "provider echoing the API key",
        "provider",
        _provider("echo_key", "401 quoting the API key"),
        quiet=True,
        brokers=REDIS,
    ),
)
"""Every fault, in the order ``make chaos`` runs them."""

REDIS_RESTARTS_FAULT: Final = Fault(
    "redis-restarts",
    f"Redis restarted {REDIS_RESTARTS} times under load",
    "state",
    _redis_restarts,
    brokers=REDIS,
)
"""Kombu's Redis transport once killed a worker that had a task in flight when Redis
restarted: run on the Redis leg after the matrix, reported in a section of its own (worker
deaths, lost runs); ``--only redis-restarts`` runs it alone."""

BY_SLUG: Final = {fault.slug: fault for fault in MATRIX}
SHORT_FORM: Final = (
    "worker-kill",
    "redis-restart",
    "postgres-cut",
    "api-restart",
    "provider-500",
)
"""One fault of each kind (process, state, network, service, provider) for ``make test``."""
