"""Clocks across processes: Redis's ``TIME`` as the shared reference, and the marker each
reconciler pass leaves so a diagnostic can tell when the last pass ran (beat is alive) and how
far the clock of the worker that ran it was from Redis's.

Locks, the pool's advertisements and the fair queue run on Redis's clock; job rows and logs on
each process's own. A process whose clock is off by seconds shows wrong job timings and ages
markers wrongly, hence the check.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from om_workers.coordination import keys
from om_workers.coordination.connection import translate_errors


def redis_time_ms(client: redis.Redis) -> int:
    """Redis's clock, milliseconds since the epoch. Raises
    :class:`~om_workers.errors.RedisUnavailableError` when Redis cannot be reached."""
    with translate_errors("reading Redis's clock"):
        seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


@dataclass(frozen=True)
class ReconcilePass:
    """The newest reconciler pass: when it ran on Redis's clock and on its worker's, in ms."""

    redis_ms: int
    local_ms: int

    @property
    def skew_ms(self) -> int:
        """How far the worker's clock was ahead of Redis's (negative: behind), ms."""
        return self.local_ms - self.redis_ms


def record_reconcile_pass(
    client: redis.Redis, now_s: Callable[[], float] = time.time
) -> ReconcilePass:
    """Leave the marker of a pass that just ran. Raises like :func:`redis_time_ms`."""
    local_ms = int(now_s() * 1000)
    marker = ReconcilePass(redis_time_ms(client), local_ms)
    value = json.dumps({"redis_ms": marker.redis_ms, "local_ms": marker.local_ms})
    with translate_errors("recording the reconciler's pass"):
        client.set(keys.RECONCILE_LAST, value, ex=keys.RECONCILE_LAST_TTL_S)
    return marker


def last_reconcile_pass(client: redis.Redis) -> ReconcilePass | None:
    """The newest pass's marker; ``None`` when none was left (or it is unreadable). Raises
    like :func:`redis_time_ms`."""
    with translate_errors("reading the reconciler's last pass"):
        raw = client.get(keys.RECONCILE_LAST)
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
        return ReconcilePass(int(value["redis_ms"]), int(value["local_ms"]))
    except (ValueError, KeyError, TypeError):
        return None


__all__ = ["ReconcilePass", "last_reconcile_pass", "record_reconcile_pass", "redis_time_ms"]
