"""Flush runs (one row per requested flush) and tombstones (entry ids a scope withholds)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, insert, select, update

from om_core.redaction import redact
from om_workers.errors import FlushRunNotFoundError, InvalidRunStateError, SessionNotFoundError
from om_workers.store.accounts import require_tenant
from om_workers.store.base import StoreBase
from om_workers.store.records import (
    FINAL_RUN_STATES,
    FlushRun,
    RunState,
    Tombstone,
    as_utc,
    as_utc_or_none,
)
from om_workers.store.schema import flush_runs, sessions, tombstones

MAX_ERROR_CHARS = 4000
STUCK_RUN_ERROR = "run stopped without finishing (worker lost); swept by the reconciler"


def _run_select() -> Any:
    return select(flush_runs, sessions.c.id.label("session_id")).select_from(
        flush_runs.join(sessions, sessions.c.pk == flush_runs.c.session_pk)
    )


def _to_run(row: Row[Any]) -> FlushRun:
    data = row._mapping
    return FlushRun(
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
    )


def _is_final() -> ColumnElement[bool]:
    return flush_runs.c.state.in_(sorted(FINAL_RUN_STATES))


def _update_run(
    connection: Connection,
    tenant_id: str,
    run_id: str,
    condition: ColumnElement[bool],
    values: Mapping[str, Any],
) -> Row[Any] | None:
    """Update the run when ``condition`` holds; the row as written (``None``: not updated)."""
    session_id = (
        select(sessions.c.id)
        .where(sessions.c.pk == flush_runs.c.session_pk)
        .scalar_subquery()
        .label("session_id")
    )
    return connection.execute(
        update(flush_runs)
        .where(flush_runs.c.id == run_id, flush_runs.c.tenant_id == tenant_id, condition)
        .values(**values)
        .returning(*flush_runs.c, session_id)
    ).first()


def _not_updated(connection: Connection, tenant_id: str, run_id: str) -> Exception:
    """Why a run was not updated: it does not exist, or it already finished."""
    row = connection.execute(
        select(flush_runs.c.state).where(
            flush_runs.c.id == run_id, flush_runs.c.tenant_id == tenant_id
        )
    ).first()
    if row is None:
        return FlushRunNotFoundError(f"no flush run {run_id!r}")
    return InvalidRunStateError(f"flush run {run_id!r} already {row.state}")


def _locked_run(connection: Connection, tenant_id: str, run_id: str) -> Row[Any]:
    query = _run_select().where(flush_runs.c.id == run_id, flush_runs.c.tenant_id == tenant_id)
    if connection.dialect.name == "postgresql":
        query = query.with_for_update(of=flush_runs)
    row: Row[Any] | None = connection.execute(query).first()
    if row is None:
        raise FlushRunNotFoundError(f"no flush run {run_id!r}")
    return row


def tombstone_scope(session_id: str) -> str:
    """The tombstone scope of one session: revocations write it, reads and flushes withhold it.

    Entry ids are unique per tenant, so a per-session scope loses nothing and keeps one
    session's revocations from costing another session's reads.
    """
    return f"session:{session_id}"


class RunsMixin(StoreBase):
    """Flush-run and tombstone operations of :class:`~om_workers.store.SqlStore`."""

    def create_run(
        self,
        tenant_id: str,
        session_id: str,
        *,
        force: bool = False,
        full_reflection_rebuild: bool = False,
        run_id: str | None = None,
    ) -> FlushRun:
        """Record a queued flush run (durable before anyone is told it was accepted).

        Raises :class:`SessionNotFoundError`.
        """
        new_id = run_id or uuid.uuid4().hex
        with self._write() as connection:
            session_pk = connection.execute(
                select(sessions.c.pk).where(
                    sessions.c.tenant_id == tenant_id, sessions.c.id == session_id
                )
            ).scalar()
            if session_pk is None:
                raise SessionNotFoundError(f"no session {session_id!r}")
            connection.execute(
                insert(flush_runs).values(
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
            return _to_run(_locked_run(connection, tenant_id, new_id))

    def get_run(self, tenant_id: str, run_id: str) -> FlushRun:
        """The run. Raises :class:`FlushRunNotFoundError` (also for another tenant's run)."""
        with self._read() as connection:
            row = connection.execute(
                _run_select().where(flush_runs.c.id == run_id, flush_runs.c.tenant_id == tenant_id)
            ).first()
        if row is None:
            raise FlushRunNotFoundError(f"no flush run {run_id!r}")
        return _to_run(row)

    def start_run(self, tenant_id: str, run_id: str) -> FlushRun:
        """Mark a queued run running (a redelivered running run restarts; attempts count up).

        Raises :class:`FlushRunNotFoundError`, or :class:`InvalidRunStateError` for a run
        that already finished.
        """
        with self._write() as connection:
            return self._start_locked(connection, tenant_id, run_id)[0]

    def start_pass(self, tenant_id: str, run_id: str) -> tuple[FlushRun, int]:
        """Start a run and its memory pass in one transaction: the run as started and the
        session's new epoch (see :meth:`start_run` and ``SqlStore.begin_pass``)."""
        with self._write() as connection:
            run, session_pk = self._start_locked(connection, tenant_id, run_id)
            epoch = connection.execute(
                update(sessions)
                .where(sessions.c.pk == session_pk)
                .values(epoch=sessions.c.epoch + 1, updated_at=self._now())
                .returning(sessions.c.epoch)
            ).scalar_one()
            return run, int(epoch)

    def _start_locked(
        self, connection: Connection, tenant_id: str, run_id: str
    ) -> tuple[FlushRun, int]:
        values = {
            "state": "running",
            "started_at": self._now(),
            "attempts": flush_runs.c.attempts + 1,
        }
        row = _update_run(connection, tenant_id, run_id, ~_is_final(), values)
        if row is None:
            raise _not_updated(connection, tenant_id, run_id)
        return _to_run(row), int(row.session_pk)

    def finish_run(
        self,
        tenant_id: str,
        run_id: str,
        state: RunState,
        *,
        counts: Mapping[str, int] | None = None,
        error: str | None = None,
        secrets: Iterable[str] = (),
    ) -> FlushRun:
        """Mark a run succeeded, failed or skipped, with its counts and redacted error.

        ``error`` has every exact secret replaced and is cut to ``MAX_ERROR_CHARS``. Raises
        :class:`InvalidRunStateError` for a non-final ``state`` or a run already finished,
        :class:`FlushRunNotFoundError` for an unknown run.
        """
        if state not in FINAL_RUN_STATES:
            raise InvalidRunStateError(f"{state!r} is not a final state")
        text = None if error is None else redact(error, secrets)[:MAX_ERROR_CHARS]
        values = {
            "state": state,
            "finished_at": self._now(),
            "counts": dict(counts or {}),
            "error": text,
        }
        with self._write() as connection:
            row = _update_run(connection, tenant_id, run_id, ~_is_final(), values)
            if row is None:
                raise _not_updated(connection, tenant_id, run_id)
            return _to_run(row)

    def widen_run_options(
        self, tenant_id: str, run_id: str, *, force: bool, full_reflection_rebuild: bool
    ) -> bool:
        """Add ``force`` / ``full_reflection_rebuild`` to a queued run a request coalesced into.

        Options only ever widen (a coalesced request never takes one away). Returns False when
        the run is no longer queued (it already read its options; the caller then lets it be).
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
                update(flush_runs)
                .where(
                    flush_runs.c.id == run_id,
                    flush_runs.c.tenant_id == tenant_id,
                    flush_runs.c.state == "queued",
                )
                .values(**values)
            ).rowcount
        return bool(changed)

    def fail_stuck_runs(self, started_before: datetime) -> tuple[str, ...]:
        """Mark every run still ``running`` that started before ``started_before`` as failed.

        For the reconciler, across tenants: such a run's worker died without finishing it.
        Returns the ids it marked.
        """
        with self._write() as connection:
            ids = tuple(
                connection.execute(
                    select(flush_runs.c.id).where(
                        flush_runs.c.state == "running",
                        flush_runs.c.started_at < started_before,
                    )
                ).scalars()
            )
            if ids:
                connection.execute(
                    update(flush_runs)
                    .where(flush_runs.c.id.in_(ids), flush_runs.c.state == "running")
                    .values(state="failed", finished_at=self._now(), error=STUCK_RUN_ERROR)
                )
        return ids

    def add_tombstones(
        self, tenant_id: str, scope: str, entry_ids: Iterable[str], *, corrected: bool = False
    ) -> tuple[str, ...]:
        """Withhold ``entry_ids`` in ``scope``; ids already withheld take the new ``corrected``.

        Returns the ids that were not withheld before. Raises :class:`TenantNotFoundError`.
        """
        wanted = list(dict.fromkeys(entry_ids))
        with self._write() as connection:
            require_tenant(connection, tenant_id)
            known = set(
                connection.execute(
                    select(tombstones.c.entry_id).where(
                        tombstones.c.tenant_id == tenant_id, tombstones.c.scope == scope
                    )
                ).scalars()
            )
            fresh = [entry_id for entry_id in wanted if entry_id not in known]
            again = [entry_id for entry_id in wanted if entry_id in known]
            now = self._now()
            if fresh:
                connection.execute(
                    insert(tombstones),
                    [
                        {
                            "tenant_id": tenant_id,
                            "scope": scope,
                            "entry_id": entry_id,
                            "corrected": corrected,
                            "created_at": now,
                        }
                        for entry_id in fresh
                    ],
                )
            if again:
                connection.execute(
                    update(tombstones)
                    .where(
                        tombstones.c.tenant_id == tenant_id,
                        tombstones.c.scope == scope,
                        tombstones.c.entry_id.in_(again),
                    )
                    .values(corrected=corrected)
                )
        return tuple(fresh)

    def list_tombstones(self, tenant_id: str, scope: str) -> tuple[Tombstone, ...]:
        """The tombstones of one exact scope, oldest first (empty for an unknown tenant)."""
        with self._read() as connection:
            rows = connection.execute(
                select(tombstones)
                .where(tombstones.c.tenant_id == tenant_id, tombstones.c.scope == scope)
                .order_by(tombstones.c.created_at, tombstones.c.entry_id)
            ).all()
        return tuple(
            Tombstone(
                tenant_id=row.tenant_id,
                scope=row.scope,
                entry_id=row.entry_id,
                corrected=bool(row.corrected),
                created_at=as_utc(row.created_at),
            )
            for row in rows
        )

    def invalidated_ids(self, tenant_id: str, scope: str) -> frozenset[str]:
        """Entry ids one exact scope withholds, ``corrected`` ones included."""
        return frozenset(t.entry_id for t in self.list_tombstones(tenant_id, scope))
