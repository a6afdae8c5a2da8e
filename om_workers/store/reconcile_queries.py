"""Cross-tenant read queries for the reconciler (``om.reconcile``), on top of :class:`SqlStore`.

These look across every tenant on purpose: the reconciler heals lost Redis state (a restart
empties it) from what the store knows durably, and it is no tenant's request. Each is one read
unit of work on the store's engine.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from om_workers.store.records import FailureStreak, JobRef, SessionRef
from om_workers.store.store import SqlStore
from om_workers.store.unit_of_work import SqlReadUnitOfWork


def sessions_over_unobserved(store: SqlStore, threshold: int, limit: int) -> list[SessionRef]:
    """Sessions whose unobserved tokens are at least ``threshold``, most backlogged first, at
    most ``limit`` of them.

    ``threshold`` is the observer's ``observation.messageTokens`` (a session below it would
    flush to nothing). Raises ``ValueError`` for ``threshold < 1`` or ``limit < 1``, and the
    store's :class:`~om_workers.errors.StoreUnavailableError` / ``StoreError``.
    """
    if threshold < 1 or limit < 1:
        raise ValueError(f"threshold and limit must be >= 1, got {threshold}, {limit}")
    with SqlReadUnitOfWork(store.engine) as uow:
        return uow.sessions.over_unobserved(threshold, limit)


def sessions_of_jobs(store: SqlStore, job_ids: Iterable[str]) -> list[SessionRef]:
    """The distinct sessions the given jobs belong to (unknown ids are ignored), in id order.

    For re-enqueueing the sessions whose jobs the reconciler swept as failed. Raises the
    store's errors like :func:`sessions_over_unobserved`.
    """
    wanted = sorted(set(job_ids))
    if not wanted:
        return []
    with SqlReadUnitOfWork(store.engine) as uow:
        return uow.jobs.sessions_of(wanted)


def queued_jobs_before(store: SqlStore, queued_before: datetime, limit: int) -> list[JobRef]:
    """Jobs still ``queued`` that were queued before ``queued_before``, oldest first, at most
    ``limit``. For the reconciler: such a job's message may be lost (a Redis restart empties
    the queue). Raises ``ValueError`` for ``limit < 1`` and the store's errors."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    with SqlReadUnitOfWork(store.engine) as uow:
        return uow.jobs.queued_before(queued_before, limit)


def running_jobs_before(store: SqlStore, started_before: datetime, limit: int) -> list[JobRef]:
    """Jobs still ``running`` that started before ``started_before``, oldest first, at most
    ``limit``: the reconciler checks each one's session lock. Raises ``ValueError`` for
    ``limit < 1`` and the store's errors."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    with SqlReadUnitOfWork(store.engine) as uow:
        return uow.jobs.running_before(started_before, limit)


def failure_streak(
    store: SqlStore, tenant_id: str, session_id: str, limit: int = 32
) -> FailureStreak:
    """The session's current streak of failed jobs among its last ``limit`` finished ones.

    Raises the store's errors like :func:`sessions_over_unobserved`.
    """
    with SqlReadUnitOfWork(store.engine) as uow:
        outcomes = uow.jobs.outcomes(tenant_id, session_id, limit)
    failures = 0
    for state, _ in outcomes:
        if state != "failed":
            break
        failures += 1
    return FailureStreak(failures, outcomes[0][1] if failures else None)


__all__ = [
    "FailureStreak",
    "JobRef",
    "SessionRef",
    "failure_streak",
    "queued_jobs_before",
    "running_jobs_before",
    "sessions_of_jobs",
    "sessions_over_unobserved",
]
