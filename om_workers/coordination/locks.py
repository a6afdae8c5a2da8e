"""The per-session lock: one flush per session at a time, across any number of workers.

Taken under a token (the process's worker id and a random part) by a Lua script that sets the
key only when it is free or its holder's process is dead (its liveness key,
:mod:`om_workers.coordination.liveness`, is gone), in one step, and can claim the session's
``pending`` marker in the same round trip; a heartbeat (run by the process's one heartbeat thread,
:mod:`om_workers.coordination.heartbeats`) extends it every
``ttl / 3`` with a token-checked Lua script; released with a token-checked Lua script that also
reports the session's ``pending`` marker, so the releaser can publish the flush that arrived
while it ran. The lock only saves duplicate LLM spend: correctness comes from the fenced write
in the SQL store, which rejects a worker whose lock was lost between :meth:`SessionLock.check`
and its commit.

A lost lock is observable three ways: :attr:`SessionLock.lost` turns true, the optional
``on_lost`` callback runs once (metrics), and :meth:`SessionLock.check`, called before each
write, raises :class:`om_workers.errors.LockLostError`.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, cast

import redis

from om_workers.coordination import keys, liveness, timing
from om_workers.coordination.batch import Reply, ScriptCall, run_together
from om_workers.coordination.connection import translate_errors
from om_workers.coordination.heartbeats import HEARTBEATS, Heartbeats, Scheduled
from om_workers.coordination.liveness import LIVENESS, Liveness
from om_workers.errors import CoordinationError, LockLostError

_NEVER: Final = float("-inf")


@dataclass(frozen=True)
class ReleaseResult:
    """What :meth:`SessionLock.release` found.

    ``released`` is false when the lock had already been lost (expired, deleted, taken by
    another worker); ``pending_job_id`` is the job queued for this session, which the caller
    must publish again (its own message may have been dropped while this lock was busy).
    """

    released: bool
    pending_job_id: str | None


class SessionLock:
    """The lock of one session. Not reentrant; one instance per job.

    ``ttl_s`` is the lock TTL in seconds (``OM_LOCK_TTL_S``). ``clock`` returns monotonic seconds
    (injectable for tests); ``on_lost`` is called once, from whichever thread notices the loss;
    ``worker`` is the process's identity (whose liveness key the lock script sets).
    :attr:`took_over` tells whether :meth:`acquire` took the lock from a dead process.
    Every method that talks to Redis raises :class:`om_workers.errors.RedisUnavailableError`
    (or another :class:`om_workers.errors.CoordinationError`) when Redis fails.
    """

    def __init__(
        self,
        client: redis.Redis,
        tenant_id: str,
        session_id: str,
        *,
        ttl_s: float = keys.DEFAULT_LOCK_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        on_lost: Callable[[], None] | None = None,
        worker: Liveness = LIVENESS,
    ) -> None:
        self.key = keys.lock_key(tenant_id, session_id)
        self.pending_key = keys.pending_key(tenant_id, session_id)
        self._worker = worker
        self._worker_key = keys.worker_key(worker.worker_id)
        self.token = f"{worker.worker_id}/{secrets.token_hex(16)}"
        self.ttl_s = ttl_s
        self._ttl_ms = timing.ttl_ms(ttl_s)
        self._interval_s = timing.heartbeat_interval_s(ttl_s)
        self._client = client
        self._clock = clock
        self._on_lost = on_lost
        self._extend = client.register_script(keys.EXTEND_LOCK)
        self._release = client.register_script(keys.RELEASE_LOCK)
        self._acquire = client.register_script(keys.ACQUIRE_LOCK)
        self._state = threading.Lock()
        self._held = False
        self._used = False  # one acquire per instance: the token and heartbeat are single-use
        self._lost = False
        self._valid_until = _NEVER
        self._stop = threading.Event()
        self._beating = threading.RLock()  # held while a beat runs; release waits for it
        self._heartbeat_started = False
        self._scheduled: Scheduled | None = None
        self.claimed_job_id: str | None = None
        self.took_over = False

    # -- taking and keeping ------------------------------------------------------------------

    def acquire(self, *, claim_pending: bool = False, before: Sequence[ScriptCall] = ()) -> bool:
        """Take the lock if it is free or its holder's process is dead; True when this instance
        now holds it, False when busy. ``before`` are script calls sent ahead of the lock's in
        the same round trip (each gets its own reply, whatever becomes of the lock).

        With ``claim_pending`` the session's ``pending`` marker is deleted in the same atomic
        step and its job id kept in :attr:`claimed_job_id` (``None``: no marker). Claim before
        reading the session: a flush requested after this point sets a new marker and so
        schedules exactly one more job. A command redis-py retried after a lost reply finds
        the lock already holding our token (taken) and the marker already gone (``None``): the
        claimed job's own message still runs it.

        Raises :class:`CoordinationError` when this instance already held the lock once (make
        a new instance per job: a released token must never come back).
        """
        with self._state:
            if self._used:
                raise CoordinationError(f"lock {self.key!r} was already acquired by this instance")
        started = self._clock()
        replies: list[Reply] = []
        own = ScriptCall(
            self._acquire,
            [self.key, self.pending_key, self._worker_key],
            [
                self.token,
                self._ttl_ms,
                "1" if claim_pending else "0",
                keys.WORKER_PREFIX,
                timing.ttl_ms(liveness.ttl_s(self.ttl_s)),
            ],
            replies.append,
        )
        run_together(self._client, "taking the session lock", [*before, own])
        taken, pending = _answer("taking the session lock", replies[0])
        if taken not in (1, 2):
            return False
        self.took_over = taken == 2
        self._worker.keep_alive(self._client, self.ttl_s)
        self.claimed_job_id = None if pending is None else str(pending)
        with self._state:
            self._held = True
            self._used = True
            self._valid_until = timing.lock_valid_until_s(started, self.ttl_s)
        return True

    def extend(self) -> bool:
        """Reset the TTL if this instance still holds the lock; False (and lost) otherwise."""
        started = self._clock()
        with translate_errors("extending the session lock"):
            ok = self._extend(keys=[self.key], args=[self.token, self._ttl_ms])
        if ok != 1:
            self._mark_lost()
            return False
        with self._state:
            if self._held and not self._lost:
                self._valid_until = timing.lock_valid_until_s(started, self.ttl_s)
        return True

    def start_heartbeat(self, heartbeats: Heartbeats = HEARTBEATS) -> None:
        """Extend the lock every ``ttl / 3`` seconds, from the ``heartbeats`` thread, until
        :meth:`release` or until the lock is found lost. Transient Redis errors are retried at the
        next beat; once the TTL has passed since the last successful extension the lock counts as
        lost.

        Raises :class:`CoordinationError` when the lock is not held or a heartbeat is running.
        """
        with self._state:
            if not self._held or self._lost:
                raise CoordinationError(f"lock {self.key!r} is not held; nothing to keep alive")
            if self._heartbeat_started:
                raise CoordinationError(f"lock {self.key!r} already has a heartbeat")
            self._heartbeat_started = True
        self._scheduled = heartbeats.schedule(self._interval_s, self._beat)

    def _beat(self) -> float | None:
        """One extension; the delay until the next, or ``None`` once released or lost."""
        with self._beating:
            if self._stop.is_set():
                return None
            try:
                if not self.extend():
                    return None
            except CoordinationError:
                # Redis hiccup: the lock may still be ours; give up only when it must have
                # expired, and let the next beat try again otherwise.
                if self._clock() >= self._valid_until:
                    self._mark_lost()
                    return None
            return None if self._stop.is_set() else self._interval_s

    # -- observing ----------------------------------------------------------------------------

    @property
    def lost(self) -> bool:
        """True once the lock is known or presumed lost (never true before it was taken)."""
        with self._state:
            if self._lost:
                return True
            expired = self._held and self._clock() >= self._valid_until
        if expired:
            self._mark_lost()
        return expired

    def check(self, *, confirm: bool = False) -> None:
        """Raise :class:`LockLostError` unless this instance still holds the lock.

        Call before every write. The local check costs nothing: it fails once the heartbeat saw
        the lock gone or the TTL passed since the last successful extension. ``confirm=True``
        also asks Redis (one GET), catching a lock deleted since the last beat.
        Raises :class:`RedisUnavailableError` when ``confirm`` cannot reach Redis.
        """
        with self._state:
            held = self._held
        if not held or self.lost:
            raise LockLostError(self.key)
        if confirm:
            with translate_errors("confirming the session lock"):
                owner = self._client.get(self.key)
            if owner != self.token:
                self._mark_lost()
                raise LockLostError(self.key)

    def _mark_lost(self) -> None:
        with self._state:
            first = self._held and not self._lost
            self._lost = True
        self._stop.set()
        if first and self._on_lost is not None:
            self._on_lost()

    # -- using and letting go -----------------------------------------------------------------

    def release(self, *, after: Sequence[ScriptCall] = ()) -> ReleaseResult:
        """Stop the heartbeat and delete the lock if this instance still holds it; ``after``
        are script calls sent behind the lock's in the same round trip (each gets its own
        reply).

        Returns whether it was released and the pending job id, if any (see
        :class:`ReleaseResult`). Safe to call more than once and after the lock was lost.
        Raises :class:`RedisUnavailableError` when Redis cannot be reached; the lock then
        expires by itself after its TTL and the reconciler re-publishes any pending flush.
        """
        self._stop.set()
        if self._scheduled is not None:
            self._scheduled.cancel()
        with self._beating:  # a beat in progress finishes first; later ones see the stop
            pass
        replies: list[Reply] = []
        own = ScriptCall(self._release, [self.key, self.pending_key], [self.token], replies.append)
        run_together(self._client, "releasing the session lock", [own, *after])
        released, pending = _answer("releasing the session lock", replies[0])
        with self._state:
            was_held = self._held and not self._lost
            self._held = False
            self._valid_until = _NEVER
        if was_held and released != 1:
            self._mark_lost_after_release()
        return ReleaseResult(released == 1, None if pending is None else str(pending))

    def _mark_lost_after_release(self) -> None:
        # The lock expired or was taken while we ran, but no write noticed: report it once.
        with self._state:
            self._lost = True
        if self._on_lost is not None:
            self._on_lost()


def _answer(action: str, reply: Reply) -> tuple[object, object]:
    """The two-element reply of the acquire or release script; raises the
    :class:`CoordinationError` of a script that failed."""
    if isinstance(reply, redis.RedisError):
        with translate_errors(action):
            raise reply
    taken, pending = cast(list[object], reply)
    return taken, pending
