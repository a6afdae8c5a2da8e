"""Flush jobs: one row per flush request that got its own job id, from queued to finished."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, bindparam, insert, select, update

from om_core.policy.redaction import redact
from om_workers.errors import FlushJobNotFoundError, InvalidJobStateError, SessionNotFoundError
from om_workers.store.base import StoreBase
from om_workers.store.memory_view import read_memory_view
from om_workers.store.records import (
    FINAL_JOB_STATES,
    FlushJob,
    JobFinish,
    JobState,
    StartedJob,
    as_utc,
    as_utc_or_none,
)
from om_workers.store.schema import flush_jobs, sessions
from om_workers.store.tombstones import tombstone_scope

MAX_ERROR_CHARS = 4000
STUCK_JOB_ERROR = "job stopped without finishing (worker lost); swept by the reconciler"


_JOB = select(flush_jobs, sessions.c.id.label("session_id")).select_from(
    flush_jobs.join(sessions, sessions.c.pk == flush_jobs.c.session_pk)
)
_THIS_JOB = (
    flush_jobs.c.id == bindparam("job"),
    flush_jobs.c.tenant_id == bindparam("tenant"),
)
_NOT_FINAL = flush_jobs.c.state.not_in(sorted(FINAL_JOB_STATES))
_SESSION_ID = (
    select(sessions.c.id)
    .where(sessions.c.pk == flush_jobs.c.session_pk)
    .scalar_subquery()
    .label("session_id")
)
# Built once, with bound parameters: constructing a statement costs more than running it.
_GET = _JOB.where(*_THIS_JOB)
_START = (
    update(flush_jobs)
    .where(*_THIS_JOB, _NOT_FINAL)
    .values(state="running", started_at=bindparam("now"), attempts=flush_jobs.c.attempts + 1)
    .returning(*flush_jobs.c, _SESSION_ID)
)
_FINISH = (
    update(flush_jobs)
    .where(*_THIS_JOB, _NOT_FINAL)
    .values(
        state=bindparam("new_state"),
        finished_at=bindparam("now"),
        counts=bindparam("new_counts"),
        error=bindparam("new_error"),
        reason=bindparam("new_reason"),
        prompt_version=bindparam("new_prompt_version"),
    )
    .returning(*flush_jobs.c, _SESSION_ID)
)
_RAISE_EPOCH = (
    update(sessions)
    .where(sessions.c.pk == bindparam("session"))
    .values(epoch=sessions.c.epoch + 1, updated_at=bindparam("now"))
    .returning(sessions.c.epoch)
)
_STATE = select(flush_jobs.c.state).where(*_THIS_JOB)


def _to_job(row: Row[Any]) -> FlushJob:
    data = row._mapping
    return FlushJob(
        id=data["id"],
        tenant_id=data["tenant_id"],
        session_id=data["session_id"],
        state=data["state"],
        force=bool(data["force"]),
        full_reflection_rebuild=bool(data["full_reflection_rebuild"]),
        attempts=int(data["attempts"]),
        queued_at=as_utc(data["queued_at"]),
        started_at=as_utc_or_none(data["started_at"]),
        finished_at=as_utc_or_none(data["finished_at"]),
        counts=dict(data["counts"]),
        error=data["error"],
        reason=data["reason"],
        prompt_version=data["prompt_version"],
    )


def _not_updated(connection: Connection, tenant_id: str, job_id: str) -> Exception:
    """Why a job was not updated: it does not exist, or it already finished."""
    row = connection.execute(_STATE, {"job": job_id, "tenant": tenant_id}).first()
    if row is None:
        return FlushJobNotFoundError(f"no flush job {job_id!r}")
    return InvalidJobStateError(f"flush job {job_id!r} already {row.state}")


def _locked_job(connection: Connection, tenant_id: str, job_id: str) -> Row[Any]:
    query = _GET.with_for_update(of=flush_jobs) if connection.dialect.name == "postgresql" else _GET
    row: Row[Any] | None = connection.execute(query, {"job": job_id, "tenant": tenant_id}).first()
    if row is None:
        raise FlushJobNotFoundError(f"no flush job {job_id!r}")
    return row


def finish_in(
    connection: Connection, tenant_id: str, finish: JobFinish, *, now: datetime
) -> FlushJob | None:
    """Finish a job inside the caller's write transaction; the job as finished, or ``None``
    when it does not exist or already finished (nothing is written then).

    The error has every exact secret replaced and is cut to ``MAX_ERROR_CHARS``. Raises
    :class:`InvalidJobStateError` for a non-final state.
    """
    if finish.state not in FINAL_JOB_STATES:
        raise InvalidJobStateError(f"{finish.state!r} is not a final state")
    error = finish.error
    params = {
        "job": finish.job_id,
        "tenant": tenant_id,
        "new_state": finish.state,
        "now": now,
        "new_counts": dict(finish.counts),
        "new_error": None if error is None else redact(error, finish.secrets)[:MAX_ERROR_CHARS],
        "new_reason": finish.reason,
        "new_prompt_version": finish.prompt_version,
    }
    row = connection.execute(_FINISH, params).first()
    return None if row is None else _to_job(row)


class JobsMixin(StoreBase):
    """Flush-job operations of :class:`~om_workers.store.SqlStore`."""

    def create_job(
        self,
        tenant_id: str,
        session_id: str,
        *,
        force: bool = False,
        full_reflection_rebuild: bool = False,
        job_id: str | None = None,
    ) -> FlushJob:
        """Record a queued flush job (durable before anyone is told it was accepted).

        Raises :class:`SessionNotFoundError`.
        """
        new_id = job_id or uuid.uuid4().hex
        with self._write() as connection:
            session_pk = connection.execute(
                select(sessions.c.pk).where(
                    sessions.c.tenant_id == tenant_id, sessions.c.id == session_id
                )
            ).scalar()
            if session_pk is None:
                raise SessionNotFoundError(f"no session {session_id!r}")
            connection.execute(
                insert(flush_jobs).values(
                    id=new_id,
                    tenant_id=tenant_id,
                    session_pk=session_pk,
                    state="queued",
                    force=force,
                    full_reflection_rebuild=full_reflection_rebuild,
                    attempts=0,
                    queued_at=self._now(),
                    counts={},
                    error=None,
                )
            )
            return _to_job(_locked_job(connection, tenant_id, new_id))

    def get_job(self, tenant_id: str, job_id: str) -> FlushJob:
        """The job. Raises :class:`FlushJobNotFoundError` (also for another tenant's job)."""
        with self._read() as connection:
            row = connection.execute(_GET, {"job": job_id, "tenant": tenant_id}).first()
        if row is None:
            raise FlushJobNotFoundError(f"no flush job {job_id!r}")
        return _to_job(row)

    def start_job(self, tenant_id: str, job_id: str) -> StartedJob:
        """Start a flush job: mark it running (a redelivered running job restarts; attempts
        count up) and raise its session's epoch, which fences out every earlier flush of the
        session (see ``SqlStore.raise_epoch``), in one transaction; then read the session's view.

        On PostgreSQL the view is read in that same transaction. SQLite has one writer for the
        whole database, so there the write transaction does only the two updates and the view
        is read right after its commit (WAL readers never wait for writers): no older epoch can
        write after the commit, so the view is as current as one read inside it.

        Raises :class:`FlushJobNotFoundError`, or :class:`InvalidJobStateError` for a job that
        already finished.
        """
        with self._write() as connection:
            now = self._now()
            row = connection.execute(
                _START, {"job": job_id, "tenant": tenant_id, "now": now}
            ).first()
            if row is None:
                raise _not_updated(connection, tenant_id, job_id)
            job = _to_job(row)
            epoch = int(
                connection.execute(
                    _RAISE_EPOCH, {"session": int(row.session_pk), "now": now}
                ).scalar_one()
            )
            scope = tombstone_scope(job.session_id)
            if connection.dialect.name != "sqlite":
                view = read_memory_view(connection, tenant_id, job.session_id, scope)
                return StartedJob(job, epoch, view)
        with self._read() as connection:
            view = read_memory_view(connection, tenant_id, job.session_id, scope)
        return StartedJob(job, epoch, view)

    def finish_job(
        self,
        tenant_id: str,
        job_id: str,
        state: JobState,
        *,
        counts: Mapping[str, int] | None = None,
        error: str | None = None,
        secrets: Iterable[str] = (),
        prompt_version: str | None = None,
    ) -> FlushJob:
        """Mark a job succeeded, failed or skipped, with its counts and redacted error (and
        the prompt version of a job that got as far as the pipeline).

        ``error`` has every exact secret replaced and is cut to ``MAX_ERROR_CHARS``. Raises
        :class:`InvalidJobStateError` for a non-final ``state`` or a job already finished,
        :class:`FlushJobNotFoundError` for an unknown job.
        """
        finish = JobFinish(
            job_id, state, dict(counts or {}), error, tuple(secrets), prompt_version=prompt_version
        )
        with self._write() as connection:
            job = finish_in(connection, tenant_id, finish, now=self._now())
            if job is None:
                raise _not_updated(connection, tenant_id, job_id)
            return job

    def finish_job_if_open(self, tenant_id: str, finish: JobFinish) -> FlushJob | None:
        """:meth:`finish_job`, but ``None`` instead of an error when the job does not exist or
        already finished (the reconciler swept it meanwhile)."""
        with self._write() as connection:
            return finish_in(connection, tenant_id, finish, now=self._now())

    def widen_job_options(
        self, tenant_id: str, job_id: str, *, force: bool, full_reflection_rebuild: bool
    ) -> bool:
        """Add ``force`` / ``full_reflection_rebuild`` to a queued job a request coalesced into.

        Options only ever widen (a coalesced request never takes one away). Returns False when
        the job is no longer queued (it already read its options; the caller then lets it be).
        """
        if not (force or full_reflection_rebuild):
            return True
        values: dict[str, bool] = {}
        if force:
            values["force"] = True
        if full_reflection_rebuild:
            values["full_reflection_rebuild"] = True
        with self._write() as connection:
            changed = connection.execute(
                update(flush_jobs)
                .where(
                    flush_jobs.c.id == job_id,
                    flush_jobs.c.tenant_id == tenant_id,
                    flush_jobs.c.state == "queued",
                )
                .values(**values)
            ).rowcount
        return bool(changed)

    def fail_running_jobs(self, job_ids: Iterable[str], error: str) -> tuple[str, ...]:
        """Mark the given jobs failed with ``error``, those still ``running`` only (across
        tenants, for the reconciler); the ids it marked."""
        wanted = sorted(set(job_ids))
        if not wanted:
            return ()
        with self._write() as connection:
            rows = connection.execute(
                update(flush_jobs)
                .where(flush_jobs.c.id.in_(wanted), flush_jobs.c.state == "running")
                .values(state="failed", finished_at=self._now(), error=error)
                .returning(flush_jobs.c.id)
            ).scalars()
            return tuple(sorted(rows))

    def fail_stuck_jobs(self, started_before: datetime) -> tuple[str, ...]:
        """Mark every job still ``running`` that started before ``started_before`` as failed.

        For the reconciler, across tenants: such a job's worker died without finishing it.
        Returns the ids it marked.
        """
        with self._write() as connection:
            ids = tuple(
                connection.execute(
                    select(flush_jobs.c.id).where(
                        flush_jobs.c.state == "running",
                        flush_jobs.c.started_at < started_before,
                    )
                ).scalars()
            )
            if ids:
                connection.execute(
                    update(flush_jobs)
                    .where(flush_jobs.c.id.in_(ids), flush_jobs.c.state == "running")
                    .values(state="failed", finished_at=self._now(), error=STUCK_JOB_ERROR)
                )
        return ids
