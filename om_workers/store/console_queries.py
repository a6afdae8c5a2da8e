"""Read queries the web console needs beyond the API's own routes, on top of :class:`SqlStore`:
the tenants (an admin's view), a session's recent flush jobs, and the sessions linked to a
workspace. Each is one read transaction; erased (hidden) sessions and their jobs never show.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import bindparam, select

from om_workers.store.records import FlushJob, Tenant, as_utc
from om_workers.store.schema import sessions, tenants
from om_workers.store.store import SqlStore
from om_workers.store.unit_of_work import SqlReadUnitOfWork, translate_errors

MAX_LISTED: Final = 500
"""The most rows any of these queries answers (a console page, never an export)."""

_TENANTS = (
    select(tenants.c.id, tenants.c.name, tenants.c.created_at)
    .order_by(tenants.c.id)
    .limit(bindparam("limit"))
)
_LINKED = (
    select(sessions.c.id)
    .where(
        sessions.c.tenant_id == bindparam("tenant"),
        sessions.c.workspace_id == bindparam("workspace"),
        sessions.c.erased_at.is_(None),
    )
    .order_by(sessions.c.id)
    .limit(bindparam("limit"))
)


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_LISTED:
        raise ValueError(f"limit must be 1..{MAX_LISTED}, got {limit}")


def list_tenants(store: SqlStore, limit: int = MAX_LISTED) -> list[Tenant]:
    """Up to ``limit`` tenants in id order (every tenant: an admin read). Raises
    ``ValueError`` for ``limit`` outside ``1..MAX_LISTED``, and the store's
    :class:`~om_workers.errors.StoreUnavailableError` / ``StoreError``."""
    _check_limit(limit)
    with translate_errors(), store.engine.connect() as connection:
        rows = connection.execute(_TENANTS, {"limit": limit}).all()
    return [Tenant(id=r.id, name=r.name, created_at=as_utc(r.created_at)) for r in rows]


def session_jobs(store: SqlStore, tenant_id: str, session_id: str, limit: int) -> list[FlushJob]:
    """The session's flush jobs, newest first, at most ``limit`` (none for another tenant's
    session). Raises like :func:`list_tenants`."""
    _check_limit(limit)
    with SqlReadUnitOfWork(store.engine) as uow:
        return uow.jobs.of_session(tenant_id, session_id, limit)


def linked_sessions(store: SqlStore, tenant_id: str, workspace_id: str, limit: int) -> list[str]:
    """Ids of the tenant's sessions linked to the workspace ``workspace_id`` (the delegation
    funnel's children), in id order, at most ``limit``. Raises like :func:`list_tenants`."""
    _check_limit(limit)
    params = {"tenant": tenant_id, "workspace": workspace_id, "limit": limit}
    with translate_errors(), store.engine.connect() as connection:
        return [row.id for row in connection.execute(_LINKED, params)]
