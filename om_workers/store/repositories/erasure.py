"""The erasure rows: erasure jobs, the sessions each still has to delete, and hiding a session.

Hiding is what makes an erasure immediate: the session row is renamed to a name no API id can
take (:func:`hidden_name`: ids in paths never hold ``/``), so every lookup by ``(tenant, id)``
misses it at once, whatever the route; ``erased_at`` keeps it out of listings and the
reconciler's scans; its queued or running flush jobs are finished ``skipped``; sessions that
used it as their workspace are unlinked; its tombstones (revocations) and its metadata pairs
(:mod:`~om_workers.store.repositories.metadata_pairs`) are deleted. The rows themselves are
deleted later, by a worker (:mod:`om_workers.store.erasure`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, Row, bindparam, delete, func, insert, literal, select, update

from om_core.policy.subjects import SUBJECT_KEY
from om_core.read.search_narrowing import MetadataNarrowing
from om_workers.errors import ErasureJobNotFoundError
from om_workers.store.audit import insert_audit
from om_workers.store.records import FINAL_JOB_STATES, JobState, as_utc, as_utc_or_none
from om_workers.store.repositories.metadata_pairs import drop_pairs, matching_sessions
from om_workers.store.repositories.tombstones import tombstone_scope
from om_workers.store.schema import (
    api_keys,
    erasure_jobs,
    erasure_targets,
    flush_jobs,
    sessions,
    tenants,
    tombstones,
)

ErasureKind = Literal["session", "subject", "tenant", "retention"]
ERASURE_KINDS: tuple[ErasureKind, ...] = ("session", "subject", "tenant", "retention")
ERASED_REASON = "session erased"
HIDDEN_PREFIX = "/erased/"


def hidden_name(session_pk: int) -> str:
    """The id a hidden session's row carries until it is deleted: unique (its key) and never
    an API id (``/`` is refused in every id that travels in a path)."""
    return f"{HIDDEN_PREFIX}{session_pk}"


@dataclass(frozen=True, slots=True)
class ErasureTarget:
    """One session an erasure job still has to delete: its row key and its own id."""

    job_id: str
    session_pk: int
    tenant_id: str
    session_id: str


@dataclass(frozen=True, slots=True)
class ErasureJob:
    """An erasure job: what it erases (``kind``, ``target``), who asked (``key_id``; ``None``
    for an admin or the retention pass), its state and ``counts`` (sessions, entries,
    workspace entries replaced)."""

    id: str
    tenant_id: str
    kind: ErasureKind
    target: str
    key_id: str | None
    state: JobState
    attempts: int
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None


def _to_job(row: Row[Any]) -> ErasureJob:
    data = row._mapping
    return ErasureJob(
        id=data["id"],
        tenant_id=data["tenant_id"],
        kind=data["kind"],
        target=data["target"],
        key_id=data["key_id"],
        state=data["state"],
        attempts=int(data["attempts"]),
        queued_at=as_utc(data["queued_at"]),
        started_at=as_utc_or_none(data["started_at"]),
        finished_at=as_utc_or_none(data["finished_at"]),
        counts=dict(data["counts"]),
        error=data["error"],
    )


# Plain bound values, not a list: an expanding parameter is rendered into the SQL again at
# every execution.
_NOT_FINAL = erasure_jobs.c.state.not_in([literal(state) for state in sorted(FINAL_JOB_STATES)])
_INSERT_JOB = insert(erasure_jobs)
_GET = select(erasure_jobs).where(
    erasure_jobs.c.id == bindparam("job"), erasure_jobs.c.tenant_id == bindparam("tenant")
)
_GET_ANY = select(erasure_jobs).where(erasure_jobs.c.id == bindparam("job"))
_LATEST = (
    select(erasure_jobs)
    .where(
        erasure_jobs.c.tenant_id == bindparam("tenant"),
        erasure_jobs.c.kind == bindparam("job_kind"),
        erasure_jobs.c.target == bindparam("job_target"),
    )
    .order_by(erasure_jobs.c.queued_at.desc())
    .limit(1)
)
_START = (
    update(erasure_jobs)
    .where(erasure_jobs.c.id == bindparam("job"), _NOT_FINAL)
    .values(
        state="running",
        started_at=bindparam("now"),
        touched_at=bindparam("now"),
        attempts=erasure_jobs.c.attempts + 1,
    )
    .returning(*erasure_jobs.c)
)
_FINISH = (
    update(erasure_jobs)
    .where(erasure_jobs.c.id == bindparam("job"), _NOT_FINAL)
    .values(
        state=bindparam("new_state"),
        finished_at=bindparam("now"),
        counts=bindparam("new_counts"),
        error=bindparam("new_error"),
    )
    .returning(*erasure_jobs.c)
)
_COUNTS = (
    update(erasure_jobs)
    .where(erasure_jobs.c.id == bindparam("job"))
    .values(counts=bindparam("new_counts"), touched_at=bindparam("now"))
)
_TOUCH = (
    update(erasure_jobs)
    .where(erasure_jobs.c.id == bindparam("job"))
    .values(touched_at=bindparam("now"))
)
_REOPEN = (
    update(erasure_jobs)
    .where(erasure_jobs.c.id == bindparam("job"), erasure_jobs.c.state == "failed")
    .values(state="queued", finished_at=None, error=None, queued_at=bindparam("now"))
)
_LAST_SEEN = func.coalesce(erasure_jobs.c.touched_at, erasure_jobs.c.queued_at)
_UNFINISHED_BEFORE = (
    select(erasure_jobs.c.id)
    .where(_NOT_FINAL, bindparam("before") > _LAST_SEEN)
    .order_by(_LAST_SEEN)
    .limit(bindparam("limit"))
)
_LIVE = (sessions.c.tenant_id == bindparam("tenant"), sessions.c.erased_at.is_(None))
_OF_TENANT = select(sessions.c.pk, sessions.c.id).where(*_LIVE).order_by(sessions.c.pk)
_IDLE = (
    select(sessions.c.pk, sessions.c.id)
    .where(*_LIVE, sessions.c.updated_at < bindparam("before"))
    .order_by(sessions.c.updated_at, sessions.c.pk)
    .limit(bindparam("limit"))
)
_REVOKE_KEYS = (
    update(api_keys)
    .where(api_keys.c.tenant_id == bindparam("tenant"), api_keys.c.revoked_at.is_(None))
    .values(revoked_at=bindparam("now"))
)
_DELETE_TENANT = delete(tenants).where(tenants.c.id == bindparam("tenant"))
# The session's revocations go with it, now: its id is free from this commit on, and a new
# session of that id must not lose (or inherit) the scope later.
_DROP_SCOPE = delete(tombstones).where(
    tombstones.c.tenant_id == bindparam("tenant"), tombstones.c.scope == bindparam("in_scope")
)
_PENDING = (
    select(erasure_targets.c.job_id)
    .where(
        erasure_targets.c.tenant_id == bindparam("tenant"),
        erasure_targets.c.session_id == bindparam("session_id"),
    )
    .limit(1)
)
_INSERT_TARGET = insert(erasure_targets)
_TARGETS = (
    select(erasure_targets)
    .where(erasure_targets.c.job_id == bindparam("job"))
    .order_by(erasure_targets.c.session_pk)
)
_DROP_TARGET = delete(erasure_targets).where(
    erasure_targets.c.job_id == bindparam("job"),
    erasure_targets.c.session_pk == bindparam("session"),
)
_HIDE = (
    update(sessions)
    .where(sessions.c.pk == bindparam("session"))
    .values(
        id=bindparam("hidden"),
        erased_at=bindparam("now"),
        updated_at=bindparam("now"),
        workspace_id=None,
        epoch=sessions.c.epoch + 1,
    )
)
_UNLINK_CHILDREN = (
    update(sessions)
    .where(
        sessions.c.tenant_id == bindparam("tenant"),
        sessions.c.workspace_id == bindparam("workspace"),
    )
    .values(workspace_id=None)
)
_CANCEL_FLUSHES = (
    update(flush_jobs)
    .where(
        flush_jobs.c.session_pk == bindparam("session"),
        flush_jobs.c.state.in_(("queued", "running")),
    )
    .values(state="skipped", finished_at=bindparam("now"), reason=ERASED_REASON)
)


class ErasureRepository:
    """Erasure jobs and targets, on one unit of work's connection. Job lookups are scoped by
    tenant except the worker's and the reconciler's (they hold a job id the store issued)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    @property
    def connection(self) -> Connection:
        """The unit of work's connection (for the audit trail's reads)."""
        return self._connection

    def insert_job(
        self,
        job_id: str,
        tenant_id: str,
        kind: ErasureKind,
        target: str,
        key_id: str | None,
        *,
        now: datetime,
    ) -> None:
        """Insert a queued erasure job."""
        self._connection.execute(
            _INSERT_JOB,
            {
                "id": job_id,
                "tenant_id": tenant_id,
                "kind": kind,
                "target": target,
                "key_id": key_id,
                "state": "queued",
                "attempts": 0,
                "queued_at": now,
                "counts": {},
                "error": None,
            },
        )

    def get(self, tenant_id: str | None, job_id: str) -> ErasureJob:
        """The job (of ``tenant_id``; of any tenant with ``None``). Raises
        :class:`ErasureJobNotFoundError`."""
        if tenant_id is None:
            row = self._connection.execute(_GET_ANY, {"job": job_id}).first()
        else:
            row = self._connection.execute(_GET, {"job": job_id, "tenant": tenant_id}).first()
        if row is None:
            raise ErasureJobNotFoundError(f"no erasure job {job_id!r}")
        return _to_job(row)

    def latest(self, tenant_id: str, kind: ErasureKind, target: str) -> ErasureJob | None:
        """The newest job of the tenant erasing ``target``, ``None`` when there is none."""
        params = {"tenant": tenant_id, "job_kind": kind, "job_target": target}
        row = self._connection.execute(_LATEST, params).first()
        return None if row is None else _to_job(row)

    def hide(
        self, tenant_id: str, session_pk: int, session_id: str, job_id: str, now: datetime
    ) -> None:
        """Hide a session from its tenant and make it a target of ``job_id`` (see the module
        docstring)."""
        connection = self._connection
        connection.execute(
            _INSERT_TARGET,
            {
                "job_id": job_id,
                "session_pk": session_pk,
                "tenant_id": tenant_id,
                "session_id": session_id,
            },
        )
        params = {"session": session_pk, "hidden": hidden_name(session_pk), "now": now}
        connection.execute(_HIDE, params)
        # Its metadata pairs go at once: a narrowed search no longer finds it, and its
        # metadata is left only in the row a worker deletes.
        drop_pairs(connection, session_pk)
        connection.execute(_UNLINK_CHILDREN, {"tenant": tenant_id, "workspace": session_id})
        connection.execute(_CANCEL_FLUSHES, {"session": session_pk, "now": now})
        scope = {"tenant": tenant_id, "in_scope": tombstone_scope(session_id)}
        connection.execute(_DROP_SCOPE, scope)

    def start(self, job_id: str, *, now: datetime) -> ErasureJob | None:
        """Mark an unfinished job running (attempts count up); ``None`` when it is unknown or
        finished."""
        row = self._connection.execute(_START, {"job": job_id, "now": now}).first()
        return None if row is None else _to_job(row)

    def finish(
        self,
        job_id: str,
        state: JobState,
        counts: Mapping[str, int],
        error: str | None,
        *,
        now: datetime,
    ) -> ErasureJob | None:
        """Finish an unfinished job; ``None`` when it is unknown or already finished."""
        params = {
            "job": job_id,
            "new_state": state,
            "new_counts": dict(counts),
            "new_error": error,
            "now": now,
        }
        row = self._connection.execute(_FINISH, params).first()
        return None if row is None else _to_job(row)

    def set_counts(self, job_id: str, counts: Mapping[str, int], *, now: datetime) -> None:
        """Record the job's progress so far (a retried job adds to it)."""
        params = {"job": job_id, "new_counts": dict(counts), "now": now}
        self._connection.execute(_COUNTS, params)

    def touch(self, job_id: str, *, now: datetime) -> None:
        """Record that the job's worker is making progress (see ``touched_at``)."""
        self._connection.execute(_TOUCH, {"job": job_id, "now": now})

    def reopen(self, job_id: str, *, now: datetime) -> bool:
        """Queue a failed job again (its targets are still hidden); whether it was failed."""
        return bool(self._connection.execute(_REOPEN, {"job": job_id, "now": now}).rowcount)

    def targets(self, job_id: str) -> list[ErasureTarget]:
        """The sessions the job still has to delete, by key."""
        rows = self._connection.execute(_TARGETS, {"job": job_id})
        return [
            ErasureTarget(row.job_id, int(row.session_pk), row.tenant_id, row.session_id)
            for row in rows
        ]

    def is_pending(self, tenant_id: str, session_id: str) -> bool:
        """Whether a hidden session of this id still waits for its rows to be deleted."""
        params = {"tenant": tenant_id, "session_id": session_id}
        return self._connection.execute(_PENDING, params).first() is not None

    def drop_target(self, target: ErasureTarget) -> None:
        """Forget a target whose rows are all deleted."""
        params = {"job": target.job_id, "session": target.session_pk}
        self._connection.execute(_DROP_TARGET, params)

    def live_sessions(self, tenant_id: str, *, subject: str | None = None) -> list[tuple[int, str]]:
        """``(key, id)`` of the tenant's sessions not erased: all of them, or those whose
        metadata names ``subject`` (:data:`SUBJECT_KEY`; read from the pairs index, which
        holds only a subject :func:`~om_core.read.search_narrowing.narrowable_pairs` gives)."""
        if subject is not None:
            narrowing = MetadataNarrowing(((SUBJECT_KEY, subject),))
            return matching_sessions(self._connection, tenant_id, narrowing, None)
        rows = self._connection.execute(_OF_TENANT, {"tenant": tenant_id})
        return [(int(row.pk), row.id) for row in rows]

    def idle_sessions(self, tenant_id: str, before: datetime, limit: int) -> list[tuple[int, str]]:
        """``(key, id)`` of up to ``limit`` sessions of the tenant not written since ``before``,
        longest idle first."""
        params = {"tenant": tenant_id, "before": before, "limit": limit}
        return [(int(row.pk), row.id) for row in self._connection.execute(_IDLE, params)]

    def revoke_keys(self, tenant_id: str, now: datetime) -> None:
        """Revoke every key of the tenant still in use."""
        self._connection.execute(_REVOKE_KEYS, {"tenant": tenant_id, "now": now})

    def delete_tenant(self, tenant_id: str) -> None:
        """Delete the tenant's row and (cascading) everything it still owns."""
        self._connection.execute(_DELETE_TENANT, {"tenant": tenant_id})

    def audit(
        self,
        tenant_id: str,
        key_id: str | None,
        action: str,
        target: str,
        outcome: str,
        *,
        job_id: str | None,
        now: datetime,
    ) -> None:
        """Write an audit row in this transaction (:mod:`om_workers.store.audit`)."""
        insert_audit(
            self._connection, tenant_id, key_id, action, target, outcome, job_id=job_id, now=now
        )

    def unfinished_before(self, before: datetime, limit: int) -> tuple[str, ...]:
        """Ids of unfinished jobs (of any tenant) whose last progress (or, before any, their
        queueing) is older than ``before``, oldest first."""
        params = {"before": before, "limit": limit}
        return tuple(self._connection.execute(_UNFINISHED_BEFORE, params).scalars())


def hide_all(
    repository: ErasureRepository,
    tenant_id: str,
    found: Sequence[tuple[int, str]],
    job_id: str,
    now: datetime,
) -> None:
    """Hide each ``(session_pk, session_id)`` of ``found`` as a target of ``job_id``."""
    for session_pk, session_id in found:
        repository.hide(tenant_id, session_pk, session_id, job_id, now)
