"""Cross-tenant read queries for the reconciler (``om.reconcile``), on top of :class:`SqlStore`.

These look across every tenant on purpose: the reconciler heals lost Redis state (a restart
empties it) from what the store knows durably, and it is no tenant's request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from om_workers.store.records import as_utc
from om_workers.store.schema import flush_jobs, sessions
from om_workers.store.store import SqlStore


@dataclass(frozen=True)
class SessionRef:
    """One session, by tenant and id; ``unobserved_tokens`` as the store counts them."""

    tenant_id: str
    session_id: str
    unobserved_tokens: int = 0


def sessions_over_unobserved(store: SqlStore, threshold: int, limit: int) -> list[SessionRef]:
    """Sessions whose unobserved tokens are at least ``threshold``, most backlogged first, at
    most ``limit`` of them.

    ``threshold`` is the observer's ``observation.messageTokens`` (a session below it would
    flush to nothing). Raises ``ValueError`` for ``threshold < 1`` or ``limit < 1``, and the
    store's :class:`~om_workers.errors.StoreUnavailableError` / ``StoreError``.
    """
    if threshold < 1 or limit < 1:
        raise ValueError(f"threshold and limit must be >= 1, got {threshold}, {limit}")
    query = (
        select(sessions.c.tenant_id, sessions.c.id, sessions.c.unobserved_tokens)
        .where(sessions.c.unobserved_tokens >= threshold)
        .order_by(sessions.c.unobserved_tokens.desc(), sessions.c.pk)
        .limit(limit)
    )
    with store._read() as connection:  # the package's own transaction and error translation
        rows = connection.execute(query).all()
    return [SessionRef(row.tenant_id, row.id, int(row.unobserved_tokens)) for row in rows]


def sessions_of_jobs(store: SqlStore, job_ids: Iterable[str]) -> list[SessionRef]:
    """The distinct sessions the given jobs belong to (unknown ids are ignored), in id order.

    For re-enqueueing the sessions whose jobs the reconciler swept as failed. Raises the
    store's errors like :func:`sessions_over_unobserved`.
    """
    wanted = sorted(set(job_ids))
    if not wanted:
        return []
    query = (
        select(sessions.c.tenant_id, sessions.c.id)
        .select_from(flush_jobs.join(sessions, sessions.c.pk == flush_jobs.c.session_pk))
        .where(flush_jobs.c.id.in_(wanted))
        .distinct()
        .order_by(sessions.c.tenant_id, sessions.c.id)
    )
    with store._read() as connection:
        rows = connection.execute(query).all()
    return [SessionRef(row.tenant_id, row.id) for row in rows]


def queued_jobs_before(store: SqlStore, queued_before: datetime, limit: int) -> list[JobRef]:
    """Jobs still ``queued`` that were queued before ``queued_before``, oldest first, at most
    ``limit``. For the reconciler: such a job's message may be lost (a Redis restart empties
    the queue). Raises ``ValueError`` for ``limit < 1`` and the store's errors."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    query = (
        select(flush_jobs.c.id, sessions.c.tenant_id, sessions.c.id.label("session_id"))
        .select_from(flush_jobs.join(sessions, sessions.c.pk == flush_jobs.c.session_pk))
        .where(flush_jobs.c.state == "queued", flush_jobs.c.queued_at < queued_before)
        .order_by(flush_jobs.c.queued_at, flush_jobs.c.id)
        .limit(limit)
    )
    with store._read() as connection:
        rows = connection.execute(query).all()
    return [JobRef(row.id, SessionRef(row.tenant_id, row.session_id)) for row in rows]


def running_jobs_before(store: SqlStore, started_before: datetime, limit: int) -> list[JobRef]:
    """Jobs still ``running`` that started before ``started_before``, oldest first, at most
    ``limit``: the reconciler checks each one's session lock. Raises ``ValueError`` for
    ``limit < 1`` and the store's errors."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    query = (
        select(flush_jobs.c.id, sessions.c.tenant_id, sessions.c.id.label("session_id"))
        .select_from(flush_jobs.join(sessions, sessions.c.pk == flush_jobs.c.session_pk))
        .where(flush_jobs.c.state == "running", flush_jobs.c.started_at < started_before)
        .order_by(flush_jobs.c.started_at, flush_jobs.c.id)
        .limit(limit)
    )
    with store._read() as connection:
        rows = connection.execute(query).all()
    return [JobRef(row.id, SessionRef(row.tenant_id, row.session_id)) for row in rows]


@dataclass(frozen=True)
class JobRef:
    """A job row, by id, and its session."""

    job_id: str
    session: SessionRef


__all__ = [
    "JobRef",
    "SessionRef",
    "queued_jobs_before",
    "running_jobs_before",
    "sessions_of_jobs",
    "sessions_over_unobserved",
]


@dataclass(frozen=True)
class FailureStreak:
    """A session's consecutive failed jobs, newest backwards (skipped jobs do not break it),
    and when the last of them finished."""

    failures: int
    last_failed_at: datetime | None


def failure_streak(
    store: SqlStore, tenant_id: str, session_id: str, limit: int = 32
) -> FailureStreak:
    """The session's current streak of failed jobs among its last ``limit`` finished ones.

    Raises the store's errors like :func:`sessions_over_unobserved`.
    """
    query = (
        select(flush_jobs.c.state, flush_jobs.c.finished_at)
        .select_from(flush_jobs.join(sessions, sessions.c.pk == flush_jobs.c.session_pk))
        .where(
            sessions.c.tenant_id == tenant_id,
            sessions.c.id == session_id,
            flush_jobs.c.state.in_(("succeeded", "failed")),
        )
        .order_by(flush_jobs.c.finished_at.desc())
        .limit(limit)
    )
    with store._read() as connection:
        rows = connection.execute(query).all()
    failures = 0
    for row in rows:
        if row.state != "failed":
            break
        failures += 1
    last = as_utc(rows[0].finished_at) if failures else None
    return FailureStreak(failures, last)
