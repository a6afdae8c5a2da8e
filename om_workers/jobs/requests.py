"""Accepting a flush request: the job that will serve it, published once however many ask.

A request with nothing to do (the session's unobserved tokens below the observer's threshold,
and its newest job queued, running or succeeded) is answered by that job from one read, with no
Redis call, write or publish: a flush now would observe nothing, and the work still to come
arrives with requests of its own. A request while a job is pending joins it (``coalesced``) and
writes nothing; otherwise a job row is recorded first (durable before anyone is told), then the
``pending`` marker is set and the job published (through the fair queue, when the caller's
``publish`` is that). What runs the job is :mod:`om_workers.jobs.flush`.
"""

from __future__ import annotations

import logging

import redis

from om_workers.coordination import coalesce, keys
from om_workers.coordination.coalesce import ServingJob, drop_marker
from om_workers.coordination.connection import translate_errors
from om_workers.errors import FlushJobNotFoundError
from om_workers.jobs.deps import PublishJob
from om_workers.metrics import METRICS
from om_workers.store import SqlStore

log = logging.getLogger(__name__)


def request_flush(
    store: SqlStore,
    client: redis.Redis,
    tenant_id: str,
    session_id: str,
    *,
    publish: PublishJob,
    force: bool = False,
    full_reflection_rebuild: bool = False,
    idle_below_tokens: int | None = None,
) -> ServingJob:
    """Accept a flush request: the job id that will serve it, publishing a new job if needed.

    With ``idle_below_tokens`` (the observer's ``observation.messageTokens``), a request
    without options whose session has fewer unobserved tokens than that is answered by the
    session's newest queued, running or succeeded job (see :meth:`SqlStore.last_flush`), and
    nothing else happens; a missing session raises
    :class:`~om_workers.errors.SessionNotFoundError` before Redis is touched.
    While a job is pending its id is returned at once and nothing is written (a coalesced
    request has no job of its own, so a row for it would only be noise). Otherwise a job row
    is recorded first (a marker never names a job the store does not know), then the
    marker is set and the job published; a request that loses that race to a concurrent one
    coalesces after all, and its fresh row is finished ``skipped`` ("coalesced into ...") so no
    ``queued`` row is left that no message will ever run. When ``publish`` raises, the row is
    finished ``failed`` and the exception propagates. Raises what
    :meth:`SqlStore.create_job` and :func:`om_workers.coordination.coalesce.enqueue` raise.
    """
    if idle_below_tokens is not None:
        idle = idle_flush(
            store,
            tenant_id,
            session_id,
            force=force,
            full_reflection_rebuild=full_reflection_rebuild,
            idle_below_tokens=idle_below_tokens,
        )
        if idle is not None:
            return idle
    with translate_errors("reading the pending flush"):
        pending = client.get(keys.pending_key(tenant_id, session_id))
    if pending is not None and _still_queued(store, client, tenant_id, session_id, str(pending)):
        METRICS.coalesced.inc()
        _widen(store, tenant_id, str(pending), force, full_reflection_rebuild)
        return ServingJob(str(pending), coalesced=True)
    job = store.create_job(
        tenant_id, session_id, force=force, full_reflection_rebuild=full_reflection_rebuild
    )

    def send(job_id: str) -> None:
        publish(tenant_id, session_id, job_id)

    try:
        request = coalesce.enqueue(client, tenant_id, session_id, job.id, send)
        if request.coalesced and not _still_queued(
            store, client, tenant_id, session_id, request.job_id
        ):
            # A stale marker won the race and is gone now: ours takes its place.
            request = coalesce.enqueue(client, tenant_id, session_id, job.id, send)
    except Exception as exc:
        store.finish_job(tenant_id, job.id, "failed", error=f"not published: {exc}")
        raise
    if request.coalesced:
        METRICS.coalesced.inc()
        # Nobody else knows this row's id, so nothing can have finished it meanwhile.
        store.finish_job(tenant_id, job.id, "skipped", error=f"coalesced into {request.job_id}")
        _widen(store, tenant_id, request.job_id, force, full_reflection_rebuild)
    return request


def idle_flush(
    store: SqlStore,
    tenant_id: str,
    session_id: str,
    *,
    force: bool,
    full_reflection_rebuild: bool,
    idle_below_tokens: int,
) -> ServingJob | None:
    """The answer of :func:`request_flush` to a request with nothing to do, from one read and
    nothing else: the session's newest queued, running or succeeded job, when the request has
    no option and the session's unobserved tokens are below ``idle_below_tokens``. ``None``
    when the request must be accepted by :func:`request_flush`. Raises
    :class:`~om_workers.errors.SessionNotFoundError` for a missing session."""
    if force or full_reflection_rebuild:
        return None
    idle = store.last_flush(tenant_id, session_id).idle_answer(idle_below_tokens)
    if idle is None:
        return None
    return ServingJob(idle[0], coalesced=True, state=idle[1], idle=True)


def _still_queued(
    store: SqlStore, client: redis.Redis, tenant_id: str, session_id: str, job_id: str
) -> bool:
    """True when the pending job has not read the session yet, so it serves a new request.

    A marker can outlive its job's read (the reconciler re-marks a queued job whose marker it
    found gone while the job was just starting, say): such a marker would swallow every later
    request, so it is dropped here and False returned.
    """
    try:
        queued = store.get_job(tenant_id, job_id).state == "queued"
    except FlushJobNotFoundError:
        queued = False
    if not queued:
        drop_marker(client, tenant_id, session_id, job_id)
    return queued


def _widen(
    store: SqlStore, tenant_id: str, job_id: str, force: bool, full_reflection_rebuild: bool
) -> None:
    """Give the pending job this request's options (its row is read when the job starts).

    A job that already started has claimed its marker, so a request only coalesces into one
    that is still queued; should it have started in between, it read the session after this
    request was made, and the options miss one flush at most. A request without options has
    nothing to add (options only ever widen), so it writes nothing: the commonest request of
    all, an agent asking after every turn, stays a read.
    """
    if not force and not full_reflection_rebuild:
        return
    if not store.widen_job_options(
        tenant_id, job_id, force=force, full_reflection_rebuild=full_reflection_rebuild
    ):
        log.info("flush %s started before a coalesced request widened its options", job_id)


__all__ = ["idle_flush", "request_flush"]
