"""Which worker processes are alive: one ``om:worker:{id}`` key per process, kept by its
heartbeat thread, so a lock left by a killed process is known dead in seconds instead of after
the lock TTL.

The key is set by the lock script each time the process takes a lock, and refreshed every third
of :func:`ttl_s` by the process's heartbeat thread from then on, for as long as the process
lives. The id carries the host name and pid for whoever reads a lock in Redis, and a random part
so a reused pid is never taken for the dead process.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import secrets
import socket
import threading
from collections.abc import Sequence

import redis

from om_workers.coordination import keys, timing
from om_workers.coordination.connection import translate_errors
from om_workers.coordination.heartbeats import Heartbeats
from om_workers.errors import CoordinationError

log = logging.getLogger(__name__)


def ttl_s(lock_ttl_s: float) -> float:
    """Liveness TTL in seconds for a lock TTL: :data:`keys.LIVENESS_TTL_S`, at most the lock TTL
    (a shorter lock already frees a dead worker's session sooner)."""
    return min(keys.LIVENESS_TTL_S, lock_ttl_s)


class Liveness:
    """This process's worker id and the beat that keeps its key alive (one per process; a
    forked child gets a new id on first use). ``heartbeats`` runs the beat (default: a
    scheduler thread of its own)."""

    def __init__(self, heartbeats: Heartbeats | None = None) -> None:
        self._heartbeats = heartbeats or Heartbeats(name="om-worker-liveness")
        self._state = threading.Lock()
        self._pid = -1
        self._id = ""
        self._client: redis.Redis | None = None
        self._ttl_ms = 0
        self._generation = 0

    @property
    def worker_id(self) -> str:
        """``<host>-<pid>-<random>``, in the characters :func:`keys.worker_key` accepts."""
        with self._state:
            self._renew_after_fork()
            return self._id

    def keep_alive(self, client: redis.Redis, lock_ttl_s: float) -> None:
        """Refresh this process's key from now on (the lock script has just set it): the first
        call in a process schedules the beat; a later one with a shorter TTL replaces it."""
        ttl_ms = timing.ttl_ms(ttl_s(lock_ttl_s))
        with self._state:
            self._renew_after_fork()
            self._client = client
            if self._ttl_ms and ttl_ms >= self._ttl_ms:
                return
            # First lock, or a shorter TTL than the beat keeps: a new beat at the new pace
            # replaces the old one (which stops at its next turn).
            self._ttl_ms = ttl_ms
            self._generation += 1
            generation = self._generation
        beat = functools.partial(self._beat, generation)
        self._heartbeats.schedule(timing.heartbeat_interval_s(ttl_ms / 1000), beat)

    def _renew_after_fork(self) -> None:
        if self._pid != os.getpid():
            host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:60] or "host"
            self._pid = os.getpid()
            self._id = f"{host}-{self._pid}-{secrets.token_hex(4)}"
            self._client = None
            self._ttl_ms = 0
            self._generation += 1

    def _beat(self, generation: int) -> float | None:
        with self._state:
            client, ttl_ms, worker_id = self._client, self._ttl_ms, self._id
            if client is None or generation != self._generation:
                return None  # forked since (the child beats itself), or replaced
        try:
            with translate_errors("refreshing the worker's liveness key"):
                client.set(keys.worker_key(worker_id), "1", px=ttl_ms)
        except CoordinationError:
            log.warning("could not refresh the worker's liveness key; retrying")
        return timing.heartbeat_interval_s(ttl_ms / 1000)


LIVENESS = Liveness()
"""The process's worker identity, shared by every lock it takes. Its beat runs on a scheduler
thread of its own, so a refresh stuck on an unreachable Redis (up to the client's connect
timeout) never delays a lock's heartbeat, whose TTL may be much shorter."""


def held_by_live_workers(client: redis.Redis, lock_keys: Sequence[str]) -> list[bool]:
    """For each lock key: True when the lock exists and its holder's process is alive (or the
    token names no worker, so only its TTL can tell). Two pipelined round trips. Raises
    :class:`~om_workers.errors.RedisUnavailableError` when Redis cannot be reached."""
    with translate_errors("checking session locks"):
        pipe = client.pipeline(transaction=False)
        for key in lock_keys:
            pipe.get(key)
        owners = pipe.execute()
        holders = [keys.lock_holder(str(o)) if o is not None else None for o in owners]
        pipe = client.pipeline(transaction=False)
        for holder in holders:
            if holder is not None:
                pipe.exists(keys.worker_key(holder))
        alive = iter(pipe.execute())
    return [
        owner is not None and (holder is None or bool(next(alive)))
        for owner, holder in zip(owners, holders, strict=True)
    ]


def takeover_wait_ms(client: redis.Redis, lock_key: str) -> int:
    """Milliseconds until the lock can be taken: the sooner of its own expiry and its holder's
    liveness key expiry; 0 when it is free or its holder is dead, -1 when unknown. Raises
    :class:`~om_workers.errors.RedisUnavailableError` when Redis cannot be reached."""
    with translate_errors("reading a session lock's expiry"):
        owner = client.get(lock_key)
        if owner is None:
            return 0
        lock_ms = int(client.pttl(lock_key))
        holder = keys.lock_holder(str(owner))
        if holder is None:
            return max(lock_ms, 0)
        alive_ms = int(client.pttl(keys.worker_key(holder)))
    if alive_ms == -2:  # the key is gone: the holder died
        return 0
    return max(0, min(lock_ms, alive_ms) if alive_ms >= 0 else lock_ms)
