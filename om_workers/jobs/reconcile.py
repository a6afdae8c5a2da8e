"""One reconciler pass (what ``om.reconcile`` runs on Celery beat), pure of Celery.

Lost Redis state must cost latency, never work. A pass first sweeps the fair queue (places
held by jobs whose message was lost), then heals, in order:

1. ``pending`` markers that outlived any lock (their message was dropped at a busy lock and
   the holder died before its release re-published, or the broker lost it): re-published;
2. jobs still ``queued`` long after they were requested, with no marker naming them (a Redis
   restart emptied the queue and the markers): published again under a fresh marker, so the
   job id a client holds does finish; when another job is pending meanwhile, that job will
   read the session after this request and serves it (the row is finished ``skipped``);
3. jobs still ``running`` whose session lock is gone or held by a dead process (their worker
   died: a live worker keeps its lock and its liveness key, so this is known one liveness TTL
   after the death, whatever the lock TTL and the broker's visibility timeout), or still
   ``running`` long after they started (every redelivery is over): failed with the reason,
   and their sessions requested again at once, so the work they did not finish is done (a job
   pending meanwhile is published again: its message most likely met the dead worker's lock
   and was dropped);
4. sessions whose unobserved tokens passed ``observation.messageTokens`` with neither a
   ``pending`` marker nor a lock: requested again, unless their last jobs keep failing (a
   provider that is down, a session that breaks a guard): then the pass waits longer after
   each failure (:func:`om_workers.coordination.timing.failure_backoff_s`) instead of spending
   every pass. This is what recovers a Redis restart (the embedded Redis keeps nothing on disk, so
   every marker and queued message is gone) and a request that never reached Redis at all.

5. erasure jobs that made no progress for ``erase_retry_after_s`` (their worker died, or their
   message was lost): ``om.erase`` is published again, and the job finishes what is left.
6. webhook deliveries that are due (their message was lost, their retry was too far off to
   wait in a worker, or the worker sending them died past its claim): ``om.webhook`` is
   published again; the claim lets only one attempt through.

Every re-request goes through :func:`om_workers.jobs.requests.request_flush`, so it coalesces with
whatever is already pending, and a duplicate publish is skipped by the job row's state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import redis

from om_workers.coordination import coalesce, keys, liveness, timing
from om_workers.coordination.clock import record_reconcile_pass
from om_workers.coordination.connection import translate_errors
from om_workers.coordination.fairness import FairPublisher
from om_workers.coordination.timing import RECONCILE_SOON_WINDOW_S
from om_workers.errors import CoordinationError, FlushJobNotFoundError, InvalidJobStateError
from om_workers.jobs.deps import PublishJob
from om_workers.jobs.requests import request_flush
from om_workers.metrics import METRICS
from om_workers.store import (
    JobRef,
    SessionRef,
    SqlStore,
    failure_streak,
    queued_jobs_before,
    running_jobs_before,
    sessions_of_jobs,
    sessions_over_unobserved,
)
from om_workers.store.unit_of_work import utc_now

log = logging.getLogger(__name__)

LOST_JOB_ERROR = "worker lost: its session lock expired or its holder died; swept by the reconciler"
PublishErasure = Callable[[str], None]
"""Publishes ``om.erase`` for an erasure job id."""
PublishWebhook = Callable[[str], None]
"""Publishes ``om.webhook`` for a webhook delivery id."""
DEFAULT_SCAN_LIMIT = 500
"""Sessions over the threshold requested per pass; the rest wait for the next pass, so one pass
never floods the queue after an outage."""


@dataclass(frozen=True)
class ReconcileReport:
    """What one reconciler pass did.

    ``republished``: job ids of stale markers, orphaned queued jobs and jobs pending behind
    a swept one, published again; ``failed_jobs``: job ids swept as
    failed; ``requested``: job ids of new jobs published for swept or backlogged sessions
    (coalesced requests add none); ``backed_off``: backlogged session ids left for a later
    pass because their jobs keep failing; ``erasures``: erasure job ids published again;
    ``webhooks``: webhook delivery ids published again.
    """

    republished: tuple[str, ...]
    failed_jobs: tuple[str, ...]
    requested: tuple[str, ...] = ()
    backed_off: tuple[str, ...] = ()
    erasures: tuple[str, ...] = ()
    webhooks: tuple[str, ...] = ()


def request_reconcile_soon(
    client: redis.Redis, send: Callable[[], None], *, window_s: float = RECONCILE_SOON_WINDOW_S
) -> bool:
    """Ask for a reconciler pass now (``send`` publishes ``om.reconcile``) unless another
    process asked within ``window_s`` seconds: True when this call sent it.

    Called when something was just healed that the next scheduled pass would otherwise wait
    for (a broker connection came back, a worker process was found dead). Raises
    :class:`~om_workers.errors.RedisUnavailableError` when Redis cannot be reached, and what
    ``send`` raises (the claim is then withdrawn, so another process may ask).
    """
    with translate_errors("asking for a reconciler pass"):
        claimed = client.set(keys.RECONCILE_SOON, "1", nx=True, px=timing.ttl_ms(window_s))
    if not claimed:
        return False
    try:
        send()
    except Exception:
        with translate_errors("withdrawing a reconciler request"):
            client.delete(keys.RECONCILE_SOON)
        raise
    return True


def reconcile_once(
    store: SqlStore,
    client: redis.Redis,
    publish: PublishJob,
    *,
    stale_pending_s: float,
    stuck_job_s: float,
    lost_after_s: float | None = None,
    unobserved_threshold: int | None = None,
    scan_limit: int = DEFAULT_SCAN_LIMIT,
    failure_backoff_base_s: float = timing.FAILURE_BACKOFF_POLICY.base_s,
    failure_backoff_cap_s: float = timing.FAILURE_BACKOFF_POLICY.cap_s,
    publish_erasure: PublishErasure | None = None,
    erase_retry_after_s: float = 120.0,
    publish_webhook: PublishWebhook | None = None,
) -> ReconcileReport:
    """Run the healing steps of the module docstring once.

    ``stale_pending_s``: age in seconds after which an unlocked marker, or a queued job that no
    marker names, is published again;
    ``stuck_job_s``: seconds after its start when a ``running`` job counts as dead;
    ``lost_after_s``: a job ``running`` for longer than this whose session lock is gone, or
    held by a process whose liveness key is gone, lost its worker (a live holder keeps both), so
    it is failed and its session requested at once, without waiting for ``stuck_job_s``
    (``None`` skips this; workers pass the liveness TTL);
    ``unobserved_threshold``: tokens (``observation.messageTokens``) from which a session with
    no marker and no lock is requested again (``None`` skips step 4); ``scan_limit``: rows
    steps 2 and 4 look at per pass; ``failure_backoff_*``: step 4's wait after repeated
    failures (seconds); ``publish_erasure``: sends ``om.erase`` again for erasure jobs without
    progress for ``erase_retry_after_s`` seconds (``None`` skips step 5); ``publish_webhook``:
    sends ``om.webhook`` for due deliveries (``None`` skips step 6). Also sets the
    pending-flush gauges from its scan, and leaves the pass's marker
    (:func:`~om_workers.coordination.clock.record_reconcile_pass`) for ``om doctor``.

    Raises :class:`~om_workers.errors.RedisUnavailableError` or a store error; the next pass
    retries everything (each step is idempotent).
    """
    if isinstance(publish, FairPublisher):
        # Places in the fair queue held longer than any run: their message was lost.
        publish.sweep(stuck_job_s)
    markers = list(coalesce.pending_flushes(client))
    METRICS.observe_pending(m.age_s for m in markers)
    republished = []
    for marker in markers:
        if not marker.locked and marker.age_s >= stale_pending_s:
            publish(marker.tenant_id, marker.session_id, marker.job_id)
            republished.append(marker.job_id)
    stale_before = utc_now() - timedelta(seconds=stale_pending_s)
    for orphan in queued_jobs_before(store, stale_before, scan_limit):
        if _republish_orphan(store, client, publish, orphan):
            republished.append(orphan.job_id)
    failed = _fail_lost(store, client, lost_after_s, scan_limit) if lost_after_s else ()
    failed += store.fail_stuck_jobs(utc_now() - timedelta(seconds=stuck_job_s))
    requested = [
        job
        for ref in sessions_of_jobs(store, failed)
        if (job := _request_after_sweep(store, client, publish, ref, republished))
    ]
    backed_off: list[str] = []
    if unobserved_threshold is not None:
        for ref in sessions_over_unobserved(store, unobserved_threshold, scan_limit):
            if _busy(store, client, ref):
                continue
            if _backing_off(store, ref, failure_backoff_base_s, failure_backoff_cap_s):
                backed_off.append(ref.session_id)
            elif job := _request(store, client, publish, ref):
                requested.append(job)
    erasures: tuple[str, ...] = ()
    if publish_erasure is not None:
        stalled_before = utc_now() - timedelta(seconds=erase_retry_after_s)
        erasures = store.erasure.unfinished_jobs(stalled_before, scan_limit)
        for job_id in erasures:
            publish_erasure(job_id)
    webhooks: tuple[str, ...] = ()
    if publish_webhook is not None:
        webhooks = store.webhooks.due(scan_limit)
        for delivery_id in webhooks:
            publish_webhook(delivery_id)
    try:
        record_reconcile_pass(client)
    except CoordinationError as exc:  # only om doctor reads it: never fail a pass for it
        log.warning("the reconciler's pass marker was not written: %s", exc)
    return ReconcileReport(
        tuple(republished), failed, tuple(requested), tuple(backed_off), erasures, webhooks
    )


def heal_lost_runs(
    store: SqlStore,
    client: redis.Redis,
    publish: PublishJob,
    *,
    lost_after_s: float,
    scan_limit: int = DEFAULT_SCAN_LIMIT,
) -> ReconcileReport:
    """Step 3 of a pass alone, for :mod:`om_workers.jobs.lost_runs` to run every few seconds:
    fail the jobs ``running`` for longer than ``lost_after_s`` seconds whose session lock is
    gone or held by a dead process, and request their sessions again at once. One SQL query
    when nothing is running. Raises like :func:`reconcile_once`."""
    failed = _fail_lost(store, client, lost_after_s, scan_limit)
    republished: list[str] = []
    requested = [
        job
        for ref in sessions_of_jobs(store, failed)
        if (job := _request_after_sweep(store, client, publish, ref, republished))
    ]
    return ReconcileReport(tuple(republished), failed, tuple(requested))


def _fail_lost(
    store: SqlStore, client: redis.Redis, lost_after_s: float, limit: int
) -> tuple[str, ...]:
    """Fail the running jobs whose session lock is gone or held by a dead process: their worker
    died (or lost Redis)."""
    running = running_jobs_before(store, utc_now() - timedelta(seconds=lost_after_s), limit)
    if not running:
        return ()
    locks = [keys.lock_key(job.session.tenant_id, job.session.session_id) for job in running]
    held = liveness.held_by_live_workers(client, locks)
    lost = [job.job_id for job, alive in zip(running, held, strict=True) if not alive]
    return store.fail_running_jobs(lost, LOST_JOB_ERROR)


def _backing_off(store: SqlStore, ref: SessionRef, base_s: float, cap_s: float) -> bool:
    streak = failure_streak(store, ref.tenant_id, ref.session_id)
    wait = timing.failure_backoff_s(streak.failures, base_s=base_s, cap_s=cap_s)
    if not wait or streak.last_failed_at is None:
        return False
    return (utc_now() - streak.last_failed_at).total_seconds() < wait


def _republish_orphan(
    store: SqlStore, client: redis.Redis, publish: PublishJob, orphan: JobRef
) -> bool:
    """Publish a queued job whose marker is gone under a fresh marker; True when published."""
    ref = orphan.session

    def send(job_id: str) -> None:
        publish(ref.tenant_id, ref.session_id, job_id)

    request = coalesce.enqueue(client, ref.tenant_id, ref.session_id, orphan.job_id, send)
    if not request.coalesced:
        return True
    if request.job_id != orphan.job_id:  # a marker naming this job is step 1's business
        try:
            error = f"message lost; served by pending job {request.job_id}"
            store.finish_job(ref.tenant_id, orphan.job_id, "skipped", error=error)
        except (InvalidJobStateError, FlushJobNotFoundError):
            pass  # it ran or was swept meanwhile: nothing left to heal
    return False


def _busy(store: SqlStore, client: redis.Redis, ref: SessionRef) -> bool:
    """A lock means a flush is running (and will read the whole session, including what made it
    cross the threshold); a marker naming a job still queued means one is asked for. A marker
    naming a finished job is not (a request whose publish failed while the broker was out left
    it, and Redis was out too when it should have been dropped): the request that follows drops
    it, instead of the session waiting until the marker counts as stale."""
    with translate_errors("checking a backlogged session"):
        pending, locked = client.mget(
            keys.pending_key(ref.tenant_id, ref.session_id),
            keys.lock_key(ref.tenant_id, ref.session_id),
        )
    if locked is not None:
        return True
    if pending is None:
        return False
    try:
        return store.get_job(ref.tenant_id, str(pending)).state == "queued"
    except FlushJobNotFoundError:
        return False


def _request(store: SqlStore, client: redis.Redis, publish: PublishJob, ref: SessionRef) -> str:
    """Request a flush of the session; the new job id, or "" when it coalesced."""
    request = request_flush(store, client, ref.tenant_id, ref.session_id, publish=publish)
    return "" if request.coalesced else request.job_id


def _request_after_sweep(
    store: SqlStore,
    client: redis.Redis,
    publish: PublishJob,
    ref: SessionRef,
    republished: list[str],
) -> str:
    """Request a flush of a session whose job was swept; the new job id, or "" when it coalesced.

    A job pending meanwhile was most likely requested while the dead worker held the lock, so
    its message met that lock and was dropped, and the release that would have re-published it
    never came: it is published again now (a duplicate message is skipped by the job's state),
    instead of after ``stale_pending_s``.
    """
    request = request_flush(store, client, ref.tenant_id, ref.session_id, publish=publish)
    if not request.coalesced:
        return request.job_id
    if request.job_id not in republished:
        publish(ref.tenant_id, ref.session_id, request.job_id)
        republished.append(request.job_id)
    return ""


__all__ = ["DEFAULT_SCAN_LIMIT", "PublishErasure", "ReconcileReport", "reconcile_once"]
