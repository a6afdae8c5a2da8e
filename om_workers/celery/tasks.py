"""The Celery tasks ``om.flush``, ``om.erase``, ``om.embed`` and ``om.reconcile``: adapters of
the job bodies in :mod:`om_workers.jobs`, and what to do with a message whose job could not run.

Each task takes the process's :class:`~om_workers.jobs.deps.FlushDeps` from the factory it was
registered with (:func:`register`), so this module needs no configuration to import. A flush
whose Redis or database was unreachable before it started is retried shortly instead of acking
a message that did nothing; on RabbitMQ a message given back while its dead worker's lock is
still held waits for that lock.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, Final

from opentelemetry.trace import SpanKind

from om_workers.celery.config import QUEUE
from om_workers.celery.limits import (
    broker_of,
    busy_retry_limit,
    stale_pending_age_s,
    stuck_job_age_s,
    unobserved_threshold,
)
from om_workers.celery.webhooks import PublishWebhook, announce, webhook_publisher
from om_workers.config import get_settings
from om_workers.coordination import keys, liveness, timing
from om_workers.coordination.deferred import DEFERRED
from om_workers.coordination.fairness import FairPlace, FairPublisher
from om_workers.coordination.liveness import LIVENESS
from om_workers.jobs.deps import FlushDeps, PublishJob
from om_workers.jobs.embed import run_embed_job
from om_workers.jobs.erase import run_erasure_job
from om_workers.jobs.flush import FlushOutcome, run_flush_job
from om_workers.jobs.reconcile import PublishErasure, reconcile_once
from om_workers.jobs.retention import run_retention_pass
from om_workers.logs import log_context
from om_workers.store import AccountStore
from om_workers.store.unit_of_work import utc_now
from om_workers.telemetry import tracing

log = logging.getLogger(__name__)

FLUSH_TASK: Final = "om.flush"
ERASE_TASK: Final = "om.erase"
RETENTION_TASK: Final = "om.retention"
RECONCILE_TASK: Final = "om.reconcile"
EMBED_TASK: Final = "om.embed"
RETRY_COUNTDOWN_S: Final = 5.0
"""Wait before retrying a flush whose Redis or database was unreachable; far below any
visibility timeout, because on Redis ``self.retry(countdown=...)`` parks the message unacked in
the worker, where the broker's visibility clock keeps running. On RabbitMQ the retried message
waits in the broker instead (native delayed delivery, whole seconds)."""
MAX_UNAVAILABLE_RETRIES: Final = 6


def publisher(app: Any, *, declared: bool = False) -> PublishJob:
    """A :data:`~om_workers.jobs.deps.PublishJob` that sends ``om.flush`` through ``app``;
    with tracing on, the publish is a producer span whose W3C context rides in the message's
    headers, so the worker's span continues the trace. ``declared``: the queue is known to
    exist (a worker publishes to the queue it consumes, declared when it started), so kombu
    does not declare it again at each publish (a fifth of a publish's CPU)."""
    declare: dict[str, list[Any]] = {"declare": []} if declared else {}

    def publish(tenant_id: str, session_id: str, job_id: str) -> None:
        with tracing.span(
            f"{FLUSH_TASK} publish", kind=SpanKind.PRODUCER, attributes=_job_attributes(job_id)
        ):
            args = [tenant_id, session_id, job_id, False]
            app.send_task(
                FLUSH_TASK,
                args=args,
                queue=QUEUE,
                headers=tracing.inject_headers() or None,
                # What Celery's saferepr renders for ids this short, without walking them.
                argsrepr=repr(args),
                kwargsrepr="{}",
                **declare,
            )

    return publish


def _job_attributes(job_id: str) -> dict[str, str]:
    return {"messaging.system": "celery", "messaging.destination.name": QUEUE, "om.job_id": job_id}


def _trace_headers(request: Any) -> dict[str, str]:
    """The W3C trace-context headers a message arrived with (Celery sets each custom
    header as an attribute of the task's request)."""
    found = {name: getattr(request, name, None) for name in tracing.PROPAGATION_HEADERS}
    return {name: value for name, value in found.items() if isinstance(value, str)}


def erase_publisher(app: Any) -> PublishErasure:
    """Sends ``om.erase`` for an erasure job id through ``app`` (straight to the broker: an
    erasure is rare and must not wait behind a tenant's flush backlog)."""

    def publish(job_id: str) -> None:
        app.send_task(ERASE_TASK, args=[job_id], queue=QUEUE)

    return publish


def fair_publisher(deps: FlushDeps) -> FairPublisher | None:
    """The process's fair-queue publisher, ``None`` when fair queueing is off."""
    return deps.publish if isinstance(deps.publish, FairPublisher) else None


def register(app: Any, deps: Callable[[], FlushDeps]) -> None:
    """Register ``om.flush`` and ``om.reconcile`` on ``app``; each call takes the process's
    dependencies from ``deps`` (built on first use, so a bad setting fails the task loudly)."""

    # Registered by call, not as decorators: Celery is untyped, and the plain functions stay
    # typed and importable.
    webhooks = webhook_publisher(app)

    def flush(self: Any, tenant_id: str, session_id: str, job_id: str, force: bool = False) -> str:
        return flush_task(self, deps(), tenant_id, session_id, job_id, force, webhooks=webhooks)

    def erase(job_id: str) -> str:
        return erase_task(deps(), job_id, webhooks=webhooks)

    def reconcile() -> dict[str, list[str]]:
        return reconcile_task(deps(), erase_publisher(app), webhooks=webhooks)

    app.task(name=FLUSH_TASK, bind=True)(flush)

    def retention() -> dict[str, str]:
        return retention_task(deps(), erase_publisher(app))

    app.task(name=ERASE_TASK)(erase)

    def embed(tenant_id: str, session_id: str) -> str:
        return embed_task(deps(), tenant_id, session_id)

    app.task(name=EMBED_TASK)(embed)
    app.task(name=RETENTION_TASK)(retention)
    app.task(name=RECONCILE_TASK)(reconcile)


def flush_task(
    task: Any,
    deps: FlushDeps,
    tenant_id: str,
    session_id: str,
    job_id: str,
    force: bool = False,
    *,
    webhooks: PublishWebhook | None = None,
) -> str:
    """``om.flush``: run one flush job (see :func:`om_workers.jobs.flush.run_flush_job`);
    ``task`` is the bound Celery task (its ``request.retries`` and ``retry``); ``webhooks``
    publishes the webhook deliveries the job's end wrote.

    Its place in the fair queue is marked running when the message starts and freed when the
    message is finished with, whatever the outcome, except when Celery retries it (the retried
    message keeps the place). Returns what Flower shows: the outcome, and why a flush did
    nothing. With tracing on, the job is a consumer span continuing the publisher's trace."""
    span = tracing.continued(
        _trace_headers(task.request),
        f"{FLUSH_TASK} process",
        attributes={**_job_attributes(job_id), "om.tenant_id": tenant_id},
    )
    with span, log_context(job_id=job_id, tenant_id=tenant_id, session_id=session_id):
        fair = fair_publisher(deps)
        place = None
        if fair is not None:
            # A prefork child is not in the pool its parent advertises: its own liveness key
            # (kept from now on) tells the fair queue when it died with the job.
            LIVENESS.keep_alive(deps.redis, deps.lock_ttl_s)
            liveness_ttl_s = liveness.ttl_s(deps.lock_ttl_s)
            # Marked running with the lock's acquire and freed with its release: no round
            # trips of its own.
            place = fair.place(job_id, LIVENESS.worker_id, liveness_ttl_s)
        retrying = False
        try:
            outcome = run_flush_job(deps, tenant_id, session_id, job_id, force, place=place)
            if webhooks is not None:
                announce(deps.store, outcome.ran_job_id, webhooks, outcome.deliveries)
            if outcome.outcome == "succeeded" and deps.embedder is not None:
                _quietly(
                    "queueing the embedding of a flushed session",
                    lambda: task.app.send_task(
                        EMBED_TASK, args=[tenant_id, session_id], queue=QUEUE
                    ),
                )
            retry = _retry(deps, outcome, tenant_id, session_id, task.request)
            if retry is not None:
                countdown_s, max_retries = retry
                retrying = (task.request.retries or 0) < max_retries
                raise task.retry(countdown=countdown_s, max_retries=max_retries)
        finally:
            if place is not None and place.freed:
                _send_admitted(place, deps.lock_ttl_s)
            elif fair is not None and not retrying:
                _free_place(fair, job_id, deps.lock_ttl_s)
        tracing.set_attributes({"om.outcome": outcome.outcome})
        # Inside the job's log context and span: the line names the job and its trace.
        log.info("flush %s of %s/%s: %s", job_id, tenant_id, session_id, outcome.outcome)
    return f"{outcome.outcome}: {outcome.reason}" if outcome.reason else outcome.outcome


def _quietly(what: str, step: Callable[..., None], *args: str) -> None:
    """Run a fair-queue step; a failure costs fairness, never the job (the reconciler's sweep
    frees a place that was not freed), so it is logged, not raised."""
    try:
        step(*args)
    except Exception:
        log.warning("%s failed; the reconciler's sweep heals it", what, exc_info=True)


def _free_place(fair: FairPublisher, job_id: str, lock_ttl_s: float) -> None:
    """Free the job's place in the fair queue, or, with Redis out, as soon as it is back: a
    place left held lowers the queue's capacity until the reconciler's sweep."""
    try:
        fair.finished(job_id)
    except Exception as exc:
        what = f"freeing the fair-queue place of flush {job_id}"
        log.warning("%s failed (%s); retrying in the background", what, exc)
        DEFERRED.retry(
            what, lambda: fair.finished(job_id), timing.redis_retry_deadline_s(lock_ttl_s)
        )


def _send_admitted(place: FairPlace, lock_ttl_s: float) -> None:
    """Publish the jobs admitted when the job's place was freed; those the broker refused
    wait in their line again, and are admitted again once it is back."""
    try:
        place.send_admitted()
    except Exception as exc:
        what = f"publishing the flush jobs admitted after flush {place.job_id}"
        log.warning("%s failed (%s); retrying in the background", what, exc)
        fill = place.publisher.fill
        DEFERRED.retry(what, fill, timing.redis_retry_deadline_s(lock_ttl_s))


def _retry(
    deps: FlushDeps, outcome: FlushOutcome, tenant_id: str, session_id: str, request: Any
) -> tuple[float, int] | None:
    """``(countdown seconds, max retries)`` when the message is to be retried, else ``None``.

    A job whose Redis or database was down before it started is tried again shortly instead of
    acking a message that did nothing; a message RabbitMQ gave back while its dead worker's
    lock is still held waits for that lock (:func:`_redelivered_into_a_held_lock`)."""
    if outcome.outcome == "unavailable":
        return RETRY_COUNTDOWN_S, MAX_UNAVAILABLE_RETRIES
    retries = request.retries
    info = getattr(request, "delivery_info", None) or {}
    # A retried message was already judged given back; its copy is a new message.
    redelivered = bool(info.get("redelivered")) or (retries or 0) > 0
    wait_s = _redelivered_into_a_held_lock(
        deps, outcome, tenant_id, session_id, retries, redelivered=redelivered
    )
    if wait_s is not None:
        return wait_s, busy_retry_limit(get_settings())
    return None


def _redelivered_into_a_held_lock(
    deps: FlushDeps,
    outcome: FlushOutcome,
    tenant_id: str,
    session_id: str,
    retries: int | None,
    *,
    redelivered: bool = False,
) -> int | None:
    """Whole seconds to wait before retrying a message that met a busy session lock while its
    job is still ``running``, or still ``queued`` in a message RabbitMQ gave back
    (``redelivered``), on a RabbitMQ broker; ``None``: keep the ``busy`` outcome (ack).

    RabbitMQ gives a killed worker's message back the moment its connection drops, while that
    worker's session lock lives on until its holder's liveness key expires (a few seconds) or
    its own TTL passes: dropped at the busy lock, the message would leave its job ``running``
    until the reconciler swept it. So it is retried once the sooner of the two has passed (at
    least 1 s, at most the lock TTL; the retried message waits in the broker, native delayed
    delivery), and then takes the dead holder's lock over. On Redis the visibility timeout
    exceeds the lock TTL, so a redelivered message never meets the dead worker's lock.

    A ``queued`` job is left to the lock's holder (it reads the session after the request and
    serves it), unless the message was given back: its first consumer died holding it, maybe
    holding the lock too after claiming the job's marker (then no one would serve it until the
    reconciler counted the job stale), so it waits for the lock like a running job's message.

    A duplicate of a job that a live worker is running is retried the same way until that job
    ends (then it is ``skipped``), while ``retries`` (the message's retry count) is below
    :func:`~om_workers.celery.limits.busy_retry_limit`, then dropped as busy. An unreadable job
    row means ``None``, an unreadable lock TTL the full lock TTL; raises only the
    :class:`ConfigError` of invalid settings, which a running worker has already refused.
    """
    settings = get_settings()
    if outcome.outcome != "busy" or broker_of(settings) != "amqp":
        return None
    if (retries or 0) >= busy_retry_limit(settings):
        return None
    try:
        state = deps.store.get_job(tenant_id, outcome.job_id).state
        if state != "running" and not (state == "queued" and redelivered):
            return None  # the lock's live holder reads the session after it and serves it
    except Exception:  # the row cannot be read: drop as busy, the reconciler heals the job
        log.warning("flush %s met a busy lock and its row could not be read", outcome.job_id)
        return None
    ceiling = max(1, math.ceil(deps.lock_ttl_s))
    try:
        wait_ms = liveness.takeover_wait_ms(deps.redis, keys.lock_key(tenant_id, session_id))
    except Exception:  # Redis hiccup: the lock expires within its TTL at the latest
        return ceiling
    return min(ceiling, max(1, math.ceil(wait_ms / 1000)))


def erase_task(deps: FlushDeps, job_id: str, *, webhooks: PublishWebhook | None = None) -> str:
    """``om.erase``: run one erasure job (:func:`om_workers.jobs.erase.run_erasure_job`) with
    this process's store and Redis; its outcome and counts, for Flower (ids and numbers only).
    ``webhooks`` publishes the ``session.erased`` deliveries it wrote."""
    erasure = get_settings().erasure
    with log_context(job_id=job_id):
        run = run_erasure_job(
            deps.store,
            deps.redis,
            job_id,
            chunk=erasure.chunk_entries,
            pause_s=erasure.pause_s,
            secrets=deps.secrets,
        )
        if webhooks is not None:
            announce(deps.store, job_id, webhooks)
    counts = ", ".join(f"{name}={value}" for name, value in sorted(run.counts.items()))
    return f"{run.outcome}: {counts}" if counts else run.outcome


def embed_task(deps: FlushDeps, tenant_id: str, session_id: str) -> str:
    """``om.embed``: give a flushed session's messages and memory their vectors
    (:func:`om_workers.jobs.embed.run_embed_job`); the outcome and the count, for Flower."""
    with log_context(tenant_id=tenant_id, session_id=session_id):
        run = run_embed_job(
            deps.store,
            deps.embedder,
            tenant_id,
            session_id,
            batch_size=deps.embed_batch,
            secrets=deps.secrets,
        )
    return f"{run.outcome}: vectors={run.vectors}"


def retention_task(deps: FlushDeps, publish_erasure: PublishErasure) -> dict[str, str]:
    """``om.retention``: one retention pass (:func:`om_workers.jobs.retention.run_retention_pass`);
    tenant id -> the erasure job opened for it, for Flower."""
    accounts = AccountStore(deps.store.engine)
    batch = get_settings().erasure.retention_batch
    return run_retention_pass(deps.store, accounts, publish_erasure, now=utc_now(), batch=batch)


def reconcile_task(
    deps: FlushDeps,
    publish_erasure: PublishErasure | None = None,
    *,
    webhooks: PublishWebhook | None = None,
) -> dict[str, list[str]]:
    """``om.reconcile``: one :func:`~om_workers.jobs.reconcile.reconcile_once` pass with this
    process's settings; what it republished, failed and requested, for Flower. ``webhooks``
    publishes due webhook deliveries again."""
    publish_webhook = None if webhooks is None else (lambda delivery: webhooks(delivery, 0.0))
    settings = get_settings()
    report = reconcile_once(
        deps.store,
        deps.redis,
        deps.publish,
        stale_pending_s=stale_pending_age_s(settings),
        stuck_job_s=stuck_job_age_s(settings),
        lost_after_s=liveness.ttl_s(settings.locks.ttl_s),
        unobserved_threshold=unobserved_threshold(settings),
        publish_erasure=publish_erasure,
        erase_retry_after_s=settings.erasure.retry_after_s,
        publish_webhook=publish_webhook,
    )
    return {
        "erasures": list(report.erasures),
        "republished": list(report.republished),
        "failed_jobs": list(report.failed_jobs),
        "requested": list(report.requested),
        "webhooks": list(report.webhooks),
    }


__all__ = [
    "EMBED_TASK",
    "ERASE_TASK",
    "FLUSH_TASK",
    "RECONCILE_TASK",
    "RETENTION_TASK",
    "embed_task",
    "erase_publisher",
    "erase_task",
    "fair_publisher",
    "flush_task",
    "publisher",
    "reconcile_task",
    "register",
    "retention_task",
]
