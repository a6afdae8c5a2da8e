"""Flush-job operations of the service layer: one row per flush request that got its own job
id, from queued to finished.

Each is a short function over one unit of work. :class:`~om_workers.store.SqlStore` delegates
to these; its methods' docstrings state what each raises.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime

from om_workers.errors import SessionNotFoundError
from om_workers.store.records import FlushJob, JobFinish, JobState, LastFlush, StartedJob
from om_workers.store.repositories import tombstone_scope
from om_workers.store.service import Service

STUCK_JOB_ERROR = "job stopped without finishing (worker lost); swept by the reconciler"


class JobService(Service):
    """The flush jobs of every tenant (see :class:`~om_workers.store.SqlStore`)."""

    def create_job(
        self,
        tenant_id: str,
        session_id: str,
        *,
        force: bool,
        full_reflection_rebuild: bool,
        job_id: str | None,
    ) -> FlushJob:
        """Record a queued flush job of the session."""
        new_id = job_id or uuid.uuid4().hex
        with self._units.write() as uow:
            session = uow.sessions.head(tenant_id, session_id)
            uow.jobs.insert(
                tenant_id,
                session.pk,
                new_id,
                force=force,
                full_reflection_rebuild=full_reflection_rebuild,
                now=uow.now(),
            )
            job = uow.jobs.get(tenant_id, new_id, lock=True)
            uow.commit()
            return job

    def last_flush(self, tenant_id: str, session_id: str) -> LastFlush:
        """The session's unobserved tokens and newest job, in one statement."""
        with self._units.read(one_statement=True) as uow:
            last = uow.jobs.last_flush(tenant_id, session_id)
        if last is None:
            # The same answer whether the session is missing or another tenant's.
            raise SessionNotFoundError(f"no session {session_id!r}")
        return last

    def get_job(self, tenant_id: str, job_id: str) -> FlushJob:
        """The job."""
        with self._units.read(one_statement=True) as uow:
            return uow.jobs.get(tenant_id, job_id)

    def start_job(self, tenant_id: str, job_id: str) -> StartedJob:
        """Mark the job running and raise its session's epoch in one transaction, then read
        the session's view: in that transaction on PostgreSQL, right after its commit on
        SQLite (one writer for the whole database: the write transaction stays short, and no
        older epoch can write after the commit, so the view is as current)."""
        with self._units.write() as uow:
            now = uow.now()
            started = uow.jobs.start(tenant_id, job_id, now=now)
            if started is None:
                raise uow.jobs.why_not_updated(tenant_id, job_id)
            job, session_pk = started
            epoch = uow.sessions.raise_epoch_of(session_pk, now=now)
            scope = tombstone_scope(job.session_id)
            if uow.backend != "sqlite":
                view = uow.memory.view(tenant_id, job.session_id, scope)
                uow.commit()
                return StartedJob(job, epoch, view)
            uow.commit()
        with self._units.read() as uow:
            return StartedJob(job, epoch, uow.memory.view(tenant_id, job.session_id, scope))

    def finish_job(
        self,
        tenant_id: str,
        job_id: str,
        state: JobState,
        *,
        counts: Mapping[str, int] | None,
        error: str | None,
        secrets: Iterable[str],
        prompt_version: str | None,
    ) -> FlushJob:
        """Finish a job that has not finished; raise why when it cannot."""
        finish = JobFinish(
            job_id, state, dict(counts or {}), error, tuple(secrets), prompt_version=prompt_version
        )
        with self._units.write() as uow:
            job = uow.jobs.finish(tenant_id, finish, now=uow.now())
            if job is None:
                raise uow.jobs.why_not_updated(tenant_id, job_id)
            uow.commit()
            return job

    def finish_job_if_open(self, tenant_id: str, finish: JobFinish) -> FlushJob | None:
        """Finish a job unless it is missing or already finished (then ``None``)."""
        with self._units.write() as uow:
            job = uow.jobs.finish(tenant_id, finish, now=uow.now())
            uow.commit()
            return job

    def widen_job_options(
        self, tenant_id: str, job_id: str, *, force: bool, full_reflection_rebuild: bool
    ) -> bool:
        """Add options to a queued job; False when it is no longer queued."""
        options = {
            name: True
            for name, wanted in (
                ("force", force),
                ("full_reflection_rebuild", full_reflection_rebuild),
            )
            if wanted
        }
        if not options:
            return True
        with self._units.write() as uow:
            changed = uow.jobs.widen_queued(tenant_id, job_id, options)
            uow.commit()
        return changed

    def fail_running_jobs(self, job_ids: Iterable[str], error: str) -> tuple[str, ...]:
        """Fail those of the jobs (of any tenant) still running; the ids it failed."""
        wanted = sorted(set(job_ids))
        if not wanted:
            return ()
        with self._units.write() as uow:
            failed = uow.jobs.fail_running(wanted, error, now=uow.now())
            uow.commit()
        return failed

    def fail_stuck_jobs(self, started_before: datetime) -> tuple[str, ...]:
        """Fail every job (of any tenant) still running that started before the time."""
        with self._units.write() as uow:
            ids = uow.jobs.running_since_before(started_before)
            if ids:
                uow.jobs.fail_running(ids, STUCK_JOB_ERROR, now=uow.now())
            uow.commit()
        return ids
