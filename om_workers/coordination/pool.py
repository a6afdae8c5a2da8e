"""The live worker pool's task slots: the fair queue's capacity.

Each worker process advertises its slots (its pool's concurrency) under ``om:pool`` with an
expiry on Redis's clock, refreshed every third of :data:`TTL_S` from a scheduler thread of its
own, and withdraws them when it stops. A killed worker's slots drop out after the TTL, and with
them its running jobs' places in the fair queue (:mod:`om_workers.coordination.fairness`). The
capacity therefore follows KEDA or an operator adding and removing workers, and a lone tenant
keeps every slot busy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import cast

import redis

from om_workers.coordination import keys, timing
from om_workers.coordination.connection import translate_errors
from om_workers.coordination.heartbeats import Heartbeats
from om_workers.errors import CoordinationError

log = logging.getLogger(__name__)

TTL_S = keys.LIVENESS_TTL_S
"""How long an advertisement lasts without a refresh, seconds."""


def advertise(client: redis.Redis, worker_id: str, slots: int, ttl_s: float = TTL_S) -> int:
    """Advertise ``slots`` task slots of ``worker_id`` for ``ttl_s`` seconds (``slots=0``
    withdraws them); returns the pool's live slots. Raises
    :class:`~om_workers.errors.RedisUnavailableError` when Redis cannot be reached."""
    if slots < 0:
        raise ValueError(f"slots must be >= 0, got {slots}")
    keys.worker_key(worker_id)  # the same id rules as liveness keys
    with translate_errors("advertising the worker's slots"):
        script = client.register_script(keys.POOL_ADVERTISE)
        live = script(
            keys=[keys.POOL, keys.POOL_SLOTS], args=[worker_id, slots, timing.ttl_ms(ttl_s)]
        )
    return int(cast(int, live))


def live_slots(client: redis.Redis) -> dict[str, int]:
    """Each live worker process (its advertisement not expired on Redis's clock) and its task
    slots. Raises :class:`~om_workers.errors.RedisUnavailableError` when Redis cannot be
    reached."""
    with translate_errors("reading the worker pool"):
        seconds, micros = client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        workers = [str(w) for w in client.zrangebyscore(keys.POOL, now_ms, "+inf")]
        slots = client.hmget(keys.POOL_SLOTS, workers) if workers else []
    return {worker: int(n or 0) for worker, n in zip(workers, slots, strict=True)}


class PoolAdvert:
    """Keeps one worker process's slots advertised until :meth:`stop`. ``joined`` runs after
    the first advertisement that succeeds, and again after one that follows a failure (Redis
    came back): the pool grew, so the fair queue may admit more. It runs on the beat's
    thread; an exception it raises is logged."""

    def __init__(
        self,
        client: redis.Redis,
        worker_id: str,
        slots: int,
        joined: Callable[[], None] | None = None,
    ) -> None:
        self._client = client
        self._worker_id = worker_id
        self._slots = slots
        self._joined = joined
        self._in_pool = False
        self._stopped = False
        self._heartbeats = Heartbeats(name="om-pool-advert")

    def start(self) -> None:
        """Advertise now (a failure is logged: the beat retries) and keep refreshing."""
        self._beat()
        self._heartbeats.schedule(timing.heartbeat_interval_s(TTL_S), self._beat)

    def stop(self) -> None:
        """Withdraw the slots (best effort: they expire by themselves after the TTL)."""
        self._stopped = True
        try:
            advertise(self._client, self._worker_id, 0)
        except CoordinationError:
            log.warning("could not withdraw the worker's slots; they expire in %.0f s", TTL_S)

    def _beat(self) -> float | None:
        if self._stopped:
            return None
        try:
            advertise(self._client, self._worker_id, self._slots)
        except CoordinationError:
            self._in_pool = False
            log.warning("could not advertise the worker's slots; retrying")
            return timing.heartbeat_interval_s(TTL_S)
        if not self._in_pool:
            self._in_pool = True
            if self._joined is not None:
                try:
                    self._joined()
                except Exception:  # the reconciler's pass admits what this could not
                    log.exception("admitting flush jobs after joining the pool failed")
        return timing.heartbeat_interval_s(TTL_S)
