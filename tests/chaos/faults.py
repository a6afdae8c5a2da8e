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
from typing import Final

from tests.chaos.provider import Mode
from tests.chaos.proxy import FaultProxy
from tests.chaos.topology import Broker, ChaosTopology, Profile


@dataclass(frozen=True)
class Injected:
    """What a fault did: a description, its wall-clock start and end (``time.time()``) and
    whether API errors are expected between them (plus the profile's grace)."""

    description: str
    start: float
    end: float
    outage: bool


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

BY_SLUG: Final = {fault.slug: fault for fault in MATRIX}
SHORT_FORM: Final = (
    "worker-kill",
    "redis-restart",
    "postgres-cut",
    "api-restart",
    "provider-500",
)
"""One fault of each kind (process, state, network, service, provider) for ``make test``."""
