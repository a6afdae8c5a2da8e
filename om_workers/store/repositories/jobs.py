"""The flush-job rows: one per flush request that got its own job id, from queued to finished,
and the cross-tenant queries the reconciler heals lost Redis state with.

Every statement a flush runs is built once, with bound parameters: constructing one costs more
than running it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, bindparam, exists, insert, literal, select, update

from om_core.policy.redaction import redact
from om_core.policy.webhooks import EventType
from om_workers.errors import FlushJobNotFoundError, InvalidJobStateError
from om_workers.store.driver import FastStatement
from om_workers.store.records import (
    FINAL_JOB_STATES,
    FlushJob,
    JobFinish,
    JobRef,
    LastFlush,
    SessionRef,
    as_utc,
    as_utc_or_none,
)
from om_workers.store.repositories.usage import UsageRepository
from om_workers.store.repositories.webhooks import enqueue_event
from om_workers.store.schema import flush_jobs, sessions, webhook_endpoints

MAX_ERROR_CHARS = 4000

_JOB = select(flush_jobs, sessions.c.id.label("session_id")).select_from(
    flush_jobs.join(sessions, sessions.c.pk == flush_jobs.c.session_pk)
)
_THIS_JOB = (
    flush_jobs.c.id == bindparam("job"),
    flush_jobs.c.tenant_id == bindparam("tenant"),
)
# Plain bound values, not a list: an expanding parameter is rendered into the SQL again at
# every execution.
_NOT_FINAL = flush_jobs.c.state.not_in([literal(state) for state in sorted(FINAL_JOB_STATES)])
_SESSION_ID = (
    select(sessions.c.id)
    .where(sessions.c.pk == flush_jobs.c.session_pk)
    .scalar_subquery()
    .label("session_id")
)
# A job of an erased (hidden) session is as gone as the session.
_GET = _JOB.where(*_THIS_JOB, sessions.c.erased_at.is_(None))
_GET_PG = _GET.with_for_update(of=flush_jobs)
_INSERT = insert(flush_jobs)
_START = FastStatement(
    update(flush_jobs)
    .where(*_THIS_JOB, _NOT_FINAL)
    .values(state="running", started_at=bindparam("now"), attempts=flush_jobs.c.attempts + 1)
    .returning(*flush_jobs.c, _SESSION_ID)
)
# Whether the job's tenant has an enabled webhook endpoint, read by the finish itself: most
# have none, and their finish then skips the endpoint query (one statement fewer in SQLite's
# writers' queue). Those that do are read in the same transaction, as before. Bound to the
# tenant, not correlated: SQLite's RETURNING names the updated table's columns unqualified,
# which inside the subquery would name the endpoint's own.
_ANY_ENDPOINT = (
    exists()
    .where(
        webhook_endpoints.c.tenant_id == bindparam("tenant"),
        webhook_endpoints.c.enabled.is_(True),
    )
    .label("any_endpoint")
)
_FINISH = FastStatement(
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
    .returning(*flush_jobs.c, _SESSION_ID, _ANY_ENDPOINT)
)
_STATE = select(flush_jobs.c.state).where(*_THIS_JOB)
_FAIL_RUNNING = (
    update(flush_jobs)
    .where(flush_jobs.c.id.in_(bindparam("ids", expanding=True)), flush_jobs.c.state == "running")
    .values(state="failed", finished_at=bindparam("now"), error=bindparam("new_error"))
    .returning(flush_jobs.c.id)
)
_RUNNING_SINCE = select(flush_jobs.c.id).where(
    flush_jobs.c.state == "running", flush_jobs.c.started_at < bindparam("before")
)
_JOB_SESSION = flush_jobs.join(sessions, sessions.c.pk == flush_jobs.c.session_pk)
_SESSIONS_OF = (
    select(sessions.c.tenant_id, sessions.c.id)
    .select_from(_JOB_SESSION)
    .where(flush_jobs.c.id.in_(bindparam("ids", expanding=True)))
    .distinct()
    .order_by(sessions.c.tenant_id, sessions.c.id)
)


def _in_state_before(state: str, column: Any) -> Any:
    return (
        select(flush_jobs.c.id, sessions.c.tenant_id, sessions.c.id.label("session_id"))
        .select_from(_JOB_SESSION)
        .where(flush_jobs.c.state == state, column < bindparam("before"))
        .order_by(column, flush_jobs.c.id)
        .limit(bindparam("limit"))
    )


_LATER = flush_jobs.alias("later")


def _of_newest_job(column: Any) -> Any:
    """``column`` of the session's newest job that was not folded into another (a skipped row
    only points at the job that served it): an index probe of ix_flush_jobs_session_pk_queued_at
    per session row. A scalar subquery, not a join on it: PostgreSQL plans such a join as a hash
    join over every job row."""
    return (
        select(column)
        .where(_LATER.c.session_pk == sessions.c.pk, _LATER.c.state != "skipped")
        # The index's order alone, so the probe stops at the first row (a tie-break column
        # would sort every job of the session).
        .order_by(_LATER.c.queued_at.desc())
        .limit(1)
        .correlate(sessions)
        .scalar_subquery()
    )


# One statement: the session's unobserved tokens beside its newest job's id and state.
_LAST_FLUSH = FastStatement(
    select(
        sessions.c.unobserved_tokens,
        _of_newest_job(_LATER.c.id).label("id"),
        _of_newest_job(_LATER.c.state).label("state"),
    ).where(
        sessions.c.tenant_id == bindparam("tenant"),
        sessions.c.id == bindparam("session_id"),
        sessions.c.erased_at.is_(None),
    )
)
_QUEUED_BEFORE = _in_state_before("queued", flush_jobs.c.queued_at)
_RUNNING_BEFORE = _in_state_before("running", flush_jobs.c.started_at)
_OUTCOMES = (
    select(flush_jobs.c.state, flush_jobs.c.finished_at)
    .select_from(_JOB_SESSION)
    .where(
        sessions.c.tenant_id == bindparam("tenant"),
        sessions.c.id == bindparam("session_id"),
        flush_jobs.c.state.in_(("succeeded", "failed")),
        # Only jobs that ran: a request the broker refused (an outage) says nothing about the
        # session, and counting it would back the session off just as the broker returns.
        flush_jobs.c.started_at.is_not(None),
    )
    .order_by(flush_jobs.c.finished_at.desc())
    .limit(bindparam("limit"))
)
_SESSION_JOBS = (
    _JOB.where(
        sessions.c.tenant_id == bindparam("tenant"),
        sessions.c.id == bindparam("session"),
        sessions.c.erased_at.is_(None),
    )
    .order_by(flush_jobs.c.queued_at.desc(), flush_jobs.c.id.desc())
    .limit(bindparam("limit"))
)


_JOB_REFS = (
    select(flush_jobs.c.id, sessions.c.tenant_id, sessions.c.id.label("session_id"))
    .select_from(_JOB_SESSION)
    .where(flush_jobs.c.id.in_(bindparam("ids", expanding=True)))
)


def _announce(
    connection: Connection,
    job_id: str,
    tenant_id: str,
    session_id: str,
    state: str,
    counts: dict[str, int],
    now: datetime,
) -> tuple[str, ...]:
    """The job's end as a webhook event in the finishing transaction (ids, state and counts
    only: an error message may quote the session); the ids of the deliveries written."""
    if state not in ("succeeded", "failed"):
        return ()
    event: EventType = "flush.succeeded" if state == "succeeded" else "flush.failed"
    data = {"job_id": job_id, "session_id": session_id, "state": state, "counts": counts}
    return enqueue_event(
        connection,
        tenant_id,
        event,
        session_id=session_id,
        source_id=job_id,
        data=data,
        now=now,
    )


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


class JobRepository:
    """Flush-job rows, on one unit of work's connection. Lookups are scoped by tenant (another
    tenant's job is reported as missing), except the reconciler's queries."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def insert(
        self,
        tenant_id: str,
        session_pk: int,
        job_id: str,
        *,
        force: bool,
        full_reflection_rebuild: bool,
        now: datetime,
    ) -> None:
        """Insert a queued job of the session (found in this unit of work)."""
        self._connection.execute(
            _INSERT,
            {
                "id": job_id,
                "tenant_id": tenant_id,
                "session_pk": session_pk,
                "state": "queued",
                "force": force,
                "full_reflection_rebuild": full_reflection_rebuild,
                "attempts": 0,
                "queued_at": now,
                "counts": {},
                "error": None,
            },
        )

    def get(self, tenant_id: str, job_id: str, *, lock: bool = False) -> FlushJob:
        """The job; with ``lock``, locked until the transaction ends (``FOR UPDATE`` on
        PostgreSQL). Raises :class:`FlushJobNotFoundError`."""
        postgres = lock and self._connection.dialect.name == "postgresql"
        params = {"job": job_id, "tenant": tenant_id}
        row: Row[Any] | None = self._connection.execute(
            _GET_PG if postgres else _GET, params
        ).first()
        if row is None:
            raise FlushJobNotFoundError(f"no flush job {job_id!r}")
        return _to_job(row)

    def of_session(self, tenant_id: str, session_id: str, limit: int) -> list[FlushJob]:
        """The session's jobs, newest first, at most ``limit`` (none for another tenant's or
        an erased session)."""
        params = {"tenant": tenant_id, "session": session_id, "limit": limit}
        return [_to_job(row) for row in self._connection.execute(_SESSION_JOBS, params)]

    def last_flush(self, tenant_id: str, session_id: str) -> LastFlush | None:
        """The session's unobserved tokens and newest job not folded into another; ``None``
        when the tenant has no such session (or it is being erased)."""
        params = {"tenant": tenant_id, "session_id": session_id}
        row = _LAST_FLUSH.first(self._connection, params)
        if row is None:
            return None
        return LastFlush(int(row.unobserved_tokens), row.id, row.state)

    def start(self, tenant_id: str, job_id: str, *, now: datetime) -> tuple[FlushJob, int] | None:
        """Mark a job that has not finished ``running`` (attempts count up): the job as it now
        is and its session's key; ``None`` when it does not exist or already finished."""
        params = {"job": job_id, "tenant": tenant_id, "now": now}
        row = _START.first(self._connection, params)
        return None if row is None else (_to_job(row), int(row.session_pk))

    def finish(self, tenant_id: str, finish: JobFinish, *, now: datetime) -> FlushJob | None:
        """Finish a job that has not finished; the job as finished, ``None`` when it does not
        exist or already finished (only ``finish.usage`` is written then: the calls were
        made). The usage rows are written in this transaction either way.

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
        row = _FINISH.first(self._connection, params)
        UsageRepository(self._connection).record(tenant_id, finish.job_id, finish.usage, now=now)
        if row is None:
            return None
        job = _to_job(row)
        if not row.any_endpoint:
            return job
        deliveries = _announce(
            self._connection, job.id, tenant_id, job.session_id, job.state, job.counts, now
        )
        return dataclasses.replace(job, deliveries=deliveries)

    def why_not_updated(self, tenant_id: str, job_id: str) -> Exception:
        """Why a job was not started or finished: it does not exist
        (:class:`FlushJobNotFoundError`), or it already finished (:class:`InvalidJobStateError`)."""
        row = self._connection.execute(_STATE, {"job": job_id, "tenant": tenant_id}).first()
        if row is None:
            return FlushJobNotFoundError(f"no flush job {job_id!r}")
        return InvalidJobStateError(f"flush job {job_id!r} already {row.state}")

    def widen_queued(self, tenant_id: str, job_id: str, options: dict[str, bool]) -> bool:
        """Set ``options`` (``force``, ``full_reflection_rebuild``) on the job while it is
        queued; whether it was."""
        statement = (
            update(flush_jobs).where(*_THIS_JOB, flush_jobs.c.state == "queued").values(**options)
        )
        changed = self._connection.execute(statement, {"job": job_id, "tenant": tenant_id})
        return bool(changed.rowcount)

    def fail_running(self, job_ids: Sequence[str], error: str, *, now: datetime) -> tuple[str, ...]:
        """Mark those of the jobs (of any tenant) still ``running`` failed with ``error``; the
        ids it marked, sorted."""
        params = {"ids": list(job_ids), "now": now, "new_error": error}
        failed = tuple(sorted(self._connection.execute(_FAIL_RUNNING, params).scalars()))
        if failed:
            for ref in self._connection.execute(_JOB_REFS, {"ids": list(failed)}):
                _announce(
                    self._connection, ref.id, ref.tenant_id, ref.session_id, "failed", {}, now
                )
        return failed

    def running_since_before(self, started_before: datetime) -> tuple[str, ...]:
        """Ids of every job (of any tenant) still ``running`` that started before the time."""
        params = {"before": started_before}
        return tuple(self._connection.execute(_RUNNING_SINCE, params).scalars())

    def sessions_of(self, job_ids: Iterable[str]) -> list[SessionRef]:
        """The distinct sessions of the given jobs (unknown ids are ignored), in id order."""
        rows = self._connection.execute(_SESSIONS_OF, {"ids": list(job_ids)})
        return [SessionRef(row.tenant_id, row.id) for row in rows]

    def queued_before(self, queued_before: datetime, limit: int) -> list[JobRef]:
        """Jobs of any tenant still ``queued`` that were queued before the time, oldest first."""
        rows = self._connection.execute(_QUEUED_BEFORE, {"before": queued_before, "limit": limit})
        return [JobRef(row.id, SessionRef(row.tenant_id, row.session_id)) for row in rows]

    def running_before(self, started_before: datetime, limit: int) -> list[JobRef]:
        """Jobs of any tenant still ``running`` that started before the time, oldest first."""
        params = {"before": started_before, "limit": limit}
        rows = self._connection.execute(_RUNNING_BEFORE, params)
        return [JobRef(row.id, SessionRef(row.tenant_id, row.session_id)) for row in rows]

    def outcomes(
        self, tenant_id: str, session_id: str, limit: int
    ) -> list[tuple[str, datetime | None]]:
        """The session's last ``limit`` succeeded or failed jobs that started, newest first:
        ``(state, finished_at)``."""
        params = {"tenant": tenant_id, "session_id": session_id, "limit": limit}
        rows = self._connection.execute(_OUTCOMES, params)
        return [(row.state, as_utc_or_none(row.finished_at)) for row in rows]
