"""The funnel's links: which workspace session a session's observable messages are copied onto.

The copies themselves are appends (:mod:`om_workers.store.funnel`); this repository holds the
``sessions.workspace_id`` column's statements, built once with bound parameters.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, bindparam, select, update

from om_workers.store.schema import sessions

_SET_LINK = (
    update(sessions)
    .where(sessions.c.pk == bindparam("session"))
    .values(workspace_id=bindparam("workspace"), updated_at=bindparam("now"))
)
_LINKED_TO = (
    select(sessions.c.id)
    .where(
        sessions.c.tenant_id == bindparam("tenant_id"),
        sessions.c.workspace_id == bindparam("session_id"),
    )
    .limit(1)
)


class LinkRepository:
    """Links between a tenant's sessions, on one unit of work's connection."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def set(self, session_pk: int, workspace_id: str | None, *, now: datetime) -> None:
        """Link the session (found in this unit of work) to ``workspace_id``; ``None`` unlinks."""
        params = {"session": session_pk, "workspace": workspace_id, "now": now}
        self._connection.execute(_SET_LINK, params)

    def one_linked_to(self, tenant_id: str, session_id: str) -> str | None:
        """The id of one session whose workspace is ``session_id``, ``None`` when none is."""
        params = {"tenant_id": tenant_id, "session_id": session_id}
        linked: str | None = self._connection.execute(_LINKED_TO, params).scalar()
        return linked
