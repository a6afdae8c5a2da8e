"""Flush coalescing: however many agents ask, at most one flush runs and one waits per session.

The protocol, in the order a flush goes through it (``publish`` is injected, so this works with
Celery, with a plain queue in tests, or with anything else that runs the job later):

1. :func:`enqueue` sets the session's ``pending`` marker to a new job id with
   ``SET NX EX`` and publishes that job; while the marker exists, later requests get the same
   job id back and publish nothing.
2. The task takes the session lock and claims the marker in one step
   (:meth:`om_workers.coordination.locks.SessionLock.acquire` with ``claim_pending``). Busy: it
   drops its message and leaves ``pending`` alone (the holder will see it on release). Taken:
   the marker is gone *before the session is read*, so a request that arrives mid-flush sets a
   fresh marker and schedules exactly one more job.
3. On the way out the task calls :func:`release_and_republish`, which releases the lock and,
   when a marker is set, publishes that job again; its own message may have been dropped while
   the lock was busy. A duplicate message is harmless: whichever copy runs second finds the
   marker claimed and skips.

If Redis loses the marker (restart) or a worker dies holding it, the reconciler re-publishes
from the store's unobserved-token count, so lost Redis state costs latency, never work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import redis

from om_workers.coordination import keys
from om_workers.coordination.batch import ScriptCall
from om_workers.coordination.connection import translate_errors
from om_workers.coordination.locks import ReleaseResult, SessionLock
from om_workers.errors import CoordinationError

Publish = Callable[[str], None]
"""Publishes the flush job with this id (for example ``om.flush.apply_async``, bound to the
tenant and session). Any exception it raises propagates to the caller."""


@dataclass(frozen=True)
class ServingJob:
    """The flush job that serves a request: its id, whether it existed already
    (``coalesced``: nothing was published) and its state when the request was answered
    (``queued`` unless a request with nothing to do was answered by a job that is running or
    finished); ``idle``: the request had nothing to do (see
    :func:`om_workers.jobs.requests.request_flush`). The API answers it as a ``FlushTicket``."""

    job_id: str
    coalesced: bool
    state: str = "queued"
    idle: bool = False


def enqueue(
    client: redis.Redis,
    tenant_id: str,
    session_id: str,
    job_id: str,
    publish: Publish,
    *,
    pending_ttl_s: int = keys.PENDING_TTL_S,
) -> ServingJob:
    """Set the session's ``pending`` marker to ``job_id`` and publish it, unless a job is pending.

    Publishes ``job_id`` when it became the pending job, otherwise returns the pending job's id
    with ``coalesced=True`` and publishes nothing. Record the job row for ``job_id`` before
    calling (a marker must never name a job the store does not know). When ``publish`` raises,
    the marker is removed again (only if it still names ``job_id``) so the next request retries
    the publish instead of coalescing onto a job no queue holds, and the exception propagates.
    Raises :class:`om_workers.errors.RedisUnavailableError` when Redis cannot be reached.
    """
    key = keys.pending_key(tenant_id, session_id)
    with translate_errors("requesting a flush"):
        script = client.register_script(keys.SET_PENDING)
        created, pending = script(keys=[key], args=[job_id, pending_ttl_s])
    # A retried script whose first reply was lost finds our own id: that is still our marker.
    if created != 1 and pending != job_id:
        if pending is None:
            # One script cannot see the key exist for SET NX and vanish for GET.
            raise CoordinationError(f"pending marker {key!r} answered without a job id")
        return ServingJob(str(pending), coalesced=True)
    try:
        publish(job_id)
    except BaseException:
        with translate_errors("withdrawing an unpublished flush"):
            client.register_script(keys.DELETE_IF_EQUAL)(keys=[key], args=[job_id])
        raise
    return ServingJob(job_id, coalesced=False)


def flush_pending(client: redis.Redis, tenant_id: str, session_id: str) -> bool:
    """Whether a flush of the session is queued and not yet started (its ``pending`` marker
    is set). Raises :class:`om_workers.errors.RedisUnavailableError` when Redis cannot be
    reached."""
    with translate_errors("reading the pending flush"):
        return bool(client.exists(keys.pending_key(tenant_id, session_id)))


def drop_marker(client: redis.Redis, tenant_id: str, session_id: str, job_id: str) -> bool:
    """Delete the session's ``pending`` marker if it still names ``job_id``; True if deleted.

    For a marker that names a job which already read the session (it ran, or is running): a
    request coalesced onto it would never be served, so it must not be left to coalesce onto.
    Raises :class:`om_workers.errors.RedisUnavailableError` when Redis cannot be reached.
    """
    key = keys.pending_key(tenant_id, session_id)
    with translate_errors("dropping a stale flush marker"):
        return bool(client.register_script(keys.DELETE_IF_EQUAL)(keys=[key], args=[job_id]))


def release_and_republish(
    lock: SessionLock, publish: Publish, *, after: Sequence[ScriptCall] = ()
) -> ReleaseResult:
    """Release the lock and publish the pending job, if one was requested during the job;
    ``after`` rides along with the release (:meth:`SessionLock.release`).

    Returns the :class:`ReleaseResult`. When ``publish`` raises, the marker stays, so the
    reconciler re-publishes it later, and the exception propagates.
    Raises :class:`om_workers.errors.RedisUnavailableError` when Redis cannot be reached.
    """
    result = lock.release(after=after)
    if result.pending_job_id is not None:
        publish(result.pending_job_id)
    return result


@dataclass(frozen=True)
class PendingFlush:
    """A session's ``pending`` marker as the reconciler sees it.

    ``age_s`` is how long ago the marker was set, in seconds (from its remaining TTL, so it is
    exact only for markers set with the default ``pending_ttl_s``); ``locked`` says whether a
    worker holds the session lock right now.
    """

    tenant_id: str
    session_id: str
    job_id: str
    age_s: float
    locked: bool


def pending_flushes(
    client: redis.Redis, *, pending_ttl_s: int = keys.PENDING_TTL_S, batch: int = 500
) -> Iterator[PendingFlush]:
    """Every ``pending`` marker in Redis, scanned ``batch`` keys at a time (``SCAN``, so Redis
    is never blocked). Markers that vanish mid-scan are skipped; the view is not a snapshot,
    which is fine for its users (the reconciler and the pending-age gauge): a duplicate publish
    is skipped by the job row (a finished job does not run again).
    Raises :class:`om_workers.errors.RedisUnavailableError` when Redis cannot be reached.
    """
    with translate_errors("scanning pending flushes"):
        found = list(client.scan_iter(match=keys.PENDING_PATTERN, count=batch))
        for start in range(0, len(found), batch):
            chunk = found[start : start + batch]
            sessions = [keys.parse_pending_key(key) for key in chunk]
            pipe = client.pipeline(transaction=False)
            for key, (tenant_id, session_id) in zip(chunk, sessions, strict=True):
                pipe.get(key)
                pipe.pttl(key)
                pipe.exists(keys.lock_key(tenant_id, session_id))
            replies = pipe.execute()
            for i, (tenant_id, session_id) in enumerate(sessions):
                job_id, pttl_ms, locked = replies[3 * i : 3 * i + 3]
                if job_id is None or pttl_ms < 0:
                    continue  # claimed or expired since the SCAN saw it
                age_s = max(0.0, pending_ttl_s - pttl_ms / 1000)
                yield PendingFlush(tenant_id, session_id, str(job_id), age_s, bool(locked))


def stale_pending(
    client: redis.Redis, *, min_age_s: float, pending_ttl_s: int = keys.PENDING_TTL_S
) -> list[PendingFlush]:
    """Markers at least ``min_age_s`` seconds old whose session nobody holds the lock of.

    Their message was dropped while the lock was busy and the holder died before its release
    could re-publish it, or the broker lost it; the reconciler publishes each one's job again.
    (A Redis restart loses the markers too: the store's unobserved-token count covers that.)
    Choose ``min_age_s`` above the lock TTL plus normal queue wait, so a marker whose message is
    merely queued is not published twice (harmless, only wasteful).
    Raises :class:`om_workers.errors.RedisUnavailableError` when Redis cannot be reached.
    """
    return [
        marker
        for marker in pending_flushes(client, pending_ttl_s=pending_ttl_s)
        if not marker.locked and marker.age_s >= min_age_s
    ]
