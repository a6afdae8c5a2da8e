"""Erasure in the store: hiding what is to be erased (at once), then deleting it (a worker).

**Hide** (:meth:`ErasureService.erase_session`, ``erase_subject``, ``erase_tenant``,
``erase_idle``): one transaction writes an erasure job, hides each session it erases (see
:mod:`om_workers.store.repositories.erasure`: from the commit on, every route answers 404 for
it, listings skip it, its flush jobs are finished ``skipped``) and records the request in the
audit trail. A tenant's erasure also revokes its keys.

**Delete** (:meth:`ErasureService.erase_target`, one hidden session at a time, by a worker):

1. every funnel copy of the session's messages on a workspace, and every memory record or
   compaction of that workspace from the first copy on, becomes an erased placeholder
   (:mod:`om_core.ledger.erasure`); the workspace's snapshot and memory items are folded again
   from what is left, so the next flush re-observes what lost its memory; its epoch is raised,
   so a flush that read the copies before cannot write what it made of them; one transaction
   per workspace;
2. the session's entries, a chunk a transaction (``chunk`` entries);
3. its memory items, snapshot, flush jobs, its row, its target row and its webhook deliveries:
   one transaction (its tombstones went with the hiding, so a new session of the same id keeps
   its own), which also writes the ``session.erased`` webhook event.

Every step is idempotent (a step done finds nothing to do again), so a retried or reconciled
job finishes what a killed worker left. Job rows and audit rows hold ids only, never content.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime

from om_core.ledger.erasure import entries_to_blank, erased_placeholder
from om_core.read.search_narrowing import value_problem
from om_workers.errors import InvalidSubjectError, SessionNotFoundError
from om_workers.store.audit import AuditEvent, audit_page
from om_workers.store.records import JobState
from om_workers.store.repositories.erasure import (
    ErasureJob,
    ErasureKind,
    ErasureTarget,
    hide_all,
)
from om_workers.store.repositories.webhooks import delete_session_deliveries, enqueue_event
from om_workers.store.service import Service
from om_workers.store.unit_of_work import SqlUnitOfWork

DEFAULT_ERASE_CHUNK = 2000
"""Entries deleted per transaction while erasing a session."""


def _new_job_id() -> str:
    return f"er-{uuid.uuid4().hex}"


def _announce_erased(uow: SqlUnitOfWork, target: ErasureTarget) -> None:
    """In the transaction that deletes the session's last rows: its earlier webhook
    deliveries go too, and a ``session.erased`` event (its id and the job's) is written."""
    connection = uow.erasure.connection
    delete_session_deliveries(connection, target.tenant_id, target.session_id)
    data = {"session_id": target.session_id, "erasure_job_id": target.job_id}
    enqueue_event(
        connection,
        target.tenant_id,
        "session.erased",
        session_id=target.session_id,
        source_id=target.job_id,
        data=data,
        now=uow.now(),
    )


class ErasureService(Service):
    """The store's erasure operations (see the module docstring)."""

    def _open_job(
        self,
        uow: SqlUnitOfWork,
        tenant_id: str,
        kind: ErasureKind,
        target: str,
        key_id: str | None,
        found: list[tuple[int, str]],
    ) -> ErasureJob:
        now = uow.now()
        job_id = _new_job_id()
        uow.erasure.insert_job(job_id, tenant_id, kind, target, key_id, now=now)
        hide_all(uow.erasure, tenant_id, found, job_id, now)
        action = "retention" if kind == "retention" else "erase"
        uow.erasure.audit(tenant_id, key_id, action, target, "accepted", job_id=job_id, now=now)
        return uow.erasure.get(tenant_id, job_id)

    def erase_session(self, tenant_id: str, session_id: str, key_id: str | None) -> ErasureJob:
        """Hide the session and open its erasure job. A session already hidden or erased
        answers its latest erasure job (a second request succeeds); a session the tenant
        never had raises :class:`SessionNotFoundError`."""
        with self._units.write() as uow:
            try:
                session = uow.sessions.lock(tenant_id, session_id)
            except SessionNotFoundError:
                earlier = uow.erasure.latest(tenant_id, "session", session_id)
                if earlier is None:
                    raise
                # A failed erasure is tried again: its session is still hidden, and asking
                # again is how a client insists.
                if uow.erasure.reopen(earlier.id, now=uow.now()):
                    earlier = uow.erasure.get(tenant_id, earlier.id)
                    uow.commit()
                return earlier
            found = [(session.pk, session.id)]
            job = self._open_job(uow, tenant_id, "session", session_id, key_id, found)
            uow.commit()
            return job

    def erase_subject(self, tenant_id: str, subject: str, key_id: str | None) -> ErasureJob:
        """Hide every session of the tenant whose metadata names ``subject`` and open one
        erasure job for them (with none, the job has nothing to do and succeeds). Finds them
        in the index of the sessions' metadata pairs, whatever the tenant's size.

        Raises :class:`~om_workers.errors.InvalidSubjectError` for a subject that index cannot
        hold (over 256 characters, NUL, a lone surrogate), before anything is written."""
        problem = value_problem(subject)
        if problem is not None:
            raise InvalidSubjectError(f"no session's subject can be this one: {problem}")
        with self._units.write() as uow:
            uow.sessions.require_tenant(tenant_id)
            found = uow.erasure.live_sessions(tenant_id, subject=subject)
            job = self._open_job(uow, tenant_id, "subject", subject, key_id, found)
            uow.commit()
            return job

    def erase_tenant(self, tenant_id: str) -> ErasureJob:
        """Revoke every key of the tenant, hide all its sessions and open the job that deletes
        them and then the tenant. Raises :class:`~om_workers.errors.TenantNotFoundError`."""
        with self._units.write() as uow:
            uow.sessions.require_tenant(tenant_id)
            uow.erasure.revoke_keys(tenant_id, uow.now())
            found = uow.erasure.live_sessions(tenant_id)
            job = self._open_job(uow, tenant_id, "tenant", tenant_id, None, found)
            uow.commit()
            return job

    def idle_sessions(self, tenant_id: str, before: datetime, limit: int) -> list[str]:
        """Ids of up to ``limit`` of the tenant's sessions not written since ``before``."""
        with self._units.read() as uow:
            return [sid for _, sid in uow.erasure.idle_sessions(tenant_id, before, limit)]

    def erase_idle(self, tenant_id: str, before: datetime, limit: int) -> ErasureJob | None:
        """Hide up to ``limit`` sessions idle since ``before`` under one ``retention`` job;
        ``None`` (and nothing written) when there are none."""
        with self._units.write() as uow:
            found = uow.erasure.idle_sessions(tenant_id, before, limit)
            if not found:
                return None
            job = self._open_job(uow, tenant_id, "retention", "", None, found)
            uow.commit()
            return job

    def get_job(self, tenant_id: str | None, job_id: str) -> ErasureJob:
        """The erasure job (of ``tenant_id``, or of any tenant with ``None``). Raises
        :class:`~om_workers.errors.ErasureJobNotFoundError`."""
        with self._units.read() as uow:
            return uow.erasure.get(tenant_id, job_id)

    def start_job(self, job_id: str) -> tuple[ErasureJob, list[ErasureTarget]] | None:
        """Mark the job running and read what it still has to delete; ``None`` when the job
        is unknown or already finished."""
        with self._units.write() as uow:
            job = uow.erasure.start(job_id, now=uow.now())
            if job is None:
                return None
            targets = uow.erasure.targets(job_id)
            uow.commit()
            return job, targets

    def erase_target(
        self,
        target: ErasureTarget,
        *,
        chunk: int = DEFAULT_ERASE_CHUNK,
        pause_s: float = 0.0,
        pause: Callable[[float], None] = time.sleep,
    ) -> dict[str, int]:
        """Delete one hidden session for good (steps 1-3 of the module docstring), waiting
        ``pause_s`` seconds between two chunks (the database is other tenants' meanwhile);
        counts of what went: ``entries``, ``workspace_entries`` (placeholders written),
        ``sessions``."""
        blanked = self._blank_copies(target)
        entries = 0
        while True:
            if entries and pause_s > 0:
                pause(pause_s)
            with self._units.write() as uow:
                gone = uow.erased_rows.delete_entries_chunk(target.session_pk, chunk)
                uow.erasure.touch(target.job_id, now=uow.now())
                uow.commit()
            entries += gone
            if not gone:
                break
        with self._units.write() as uow:
            uow.erased_rows.delete_session(target.session_pk)
            uow.erasure.drop_target(target)
            _announce_erased(uow, target)
            uow.commit()
        return {"sessions": 1, "entries": entries, "workspace_entries": blanked}

    def _blank_copies(self, target: ErasureTarget) -> int:
        with self._units.read() as uow:
            copies = uow.erased_rows.copies_of(target.tenant_id, target.session_id)
        blanked = 0
        for workspace_pk, copy_ids in copies.items():
            with self._units.write() as uow:
                # Fences out a flush of the workspace that read the copies before this: its
                # records could quote them, and it may no longer write them.
                uow.sessions.raise_epoch_of(workspace_pk, now=uow.now())
                uow.sessions.mark_rewritten(workspace_pk, now=uow.now())
                stored = uow.erased_rows.entries_from_first(workspace_pk, copy_ids)
                by_id = {entry.id: entry for entry in stored}
                blank = entries_to_blank(stored, copy_ids)
                placeholders = [erased_placeholder(by_id[entry_id]) for entry_id in blank]
                uow.erased_rows.blank(workspace_pk, placeholders)
                # The copies' vectors were made from the erased text; memory is rebuilt.
                uow.vectors.forget_entries(workspace_pk, blank)
                uow.erased_rows.rebuild_memory(workspace_pk, now=uow.now())
                uow.erased_rows.forget_tombstones(target.tenant_id, copy_ids)
                uow.commit()
            blanked += len(blank)
        return blanked

    def set_counts(self, job_id: str, counts: Mapping[str, int]) -> None:
        """Record a running job's progress."""
        with self._units.write() as uow:
            uow.erasure.set_counts(job_id, counts, now=uow.now())
            uow.commit()

    def finish_job(
        self, job_id: str, state: JobState, counts: Mapping[str, int], error: str | None = None
    ) -> ErasureJob | None:
        """Finish the job and audit its outcome in one transaction; a ``tenant`` job that
        succeeded also deletes the tenant's row (and what cascades from it). ``None`` when the
        job is unknown or already finished."""
        with self._units.write() as uow:
            now = uow.now()
            job = uow.erasure.finish(job_id, state, counts, error, now=now)
            if job is None:
                return None
            if job.kind == "tenant" and state == "succeeded":
                uow.erasure.delete_tenant(job.tenant_id)
            action = "retention" if job.kind == "retention" else "erase"
            target = job.target or f"{counts.get('sessions', 0)} idle sessions"
            uow.erasure.audit(
                job.tenant_id, job.key_id, action, target, state, job_id=job.id, now=now
            )
            uow.commit()
            return job

    def unfinished_jobs(self, before: datetime, limit: int) -> tuple[str, ...]:
        """Ids of unfinished erasure jobs without progress since ``before`` (for the
        reconciler: their worker died, or their message was lost)."""
        with self._units.read() as uow:
            return uow.erasure.unfinished_before(before, limit)

    def audit_events(self, tenant_id: str | None, limit: int) -> list[AuditEvent]:
        """The newest ``limit`` audit events of one tenant, or of all with ``None``."""
        with self._units.read() as uow:
            return audit_page(uow.erasure.connection, tenant_id, limit)
