"""The audit trail: who did what to which data, when, and how it ended; never any content.

One row per event (``audit_events``). ``action`` is an open set of short words, of which this
service writes:

- ``erase``: a session, a subject or a whole tenant was asked to be erased (outcome
  ``accepted``), and its erasure job ended (``succeeded`` / ``failed``);
- ``retention``: the retention pass erased sessions idle past the tenant's
  ``retention_days`` (the same two outcomes);
- ``export`` and ``import``: written by the portability routes through
  :meth:`~om_workers.store.accounts.AccountStore.record_audit`.

``target`` names the session id, the subject or the tenant id; ``key_id`` the API key that
asked (``None`` for an admin or the retention pass); ``job_id`` the job that carried it out.
Rows are not owned by the tenant row, so a tenant's own erasure leaves its record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, bindparam, insert, select

from om_workers.store.records import as_utc
from om_workers.store.schema import audit_events

AUDIT_ACTIONS = ("erase", "retention", "export", "import")
"""The actions this service writes (the column takes any short word: the set is open)."""
MAX_AUDIT_PAGE = 1000

_INSERT = insert(audit_events)
_PAGE = (
    select(audit_events)
    .where(audit_events.c.tenant_id == bindparam("tenant"))
    .order_by(audit_events.c.created_at.desc(), audit_events.c.pk.desc())
    .limit(bindparam("limit"))
)
_PAGE_ALL = (
    select(audit_events)
    .order_by(audit_events.c.created_at.desc(), audit_events.c.pk.desc())
    .limit(bindparam("limit"))
)


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One audit record (see the module docstring)."""

    tenant_id: str
    key_id: str | None
    action: str
    target: str
    outcome: str
    job_id: str | None
    created_at: datetime


def insert_audit(
    connection: Connection,
    tenant_id: str,
    key_id: str | None,
    action: str,
    target: str,
    outcome: str,
    *,
    job_id: str | None = None,
    now: datetime,
) -> None:
    """Write one audit row on ``connection`` (inside the caller's transaction)."""
    connection.execute(
        _INSERT,
        {
            "tenant_id": tenant_id,
            "key_id": key_id,
            "action": action,
            "target": target,
            "outcome": outcome,
            "job_id": job_id,
            "created_at": now,
        },
    )


def audit_page(connection: Connection, tenant_id: str | None, limit: int) -> list[AuditEvent]:
    """The newest ``limit`` events, of one tenant or (``None``) of all."""
    if tenant_id is None:
        rows = connection.execute(_PAGE_ALL, {"limit": limit})
    else:
        rows = connection.execute(_PAGE, {"tenant": tenant_id, "limit": limit})
    return [
        AuditEvent(
            tenant_id=row.tenant_id,
            key_id=row.key_id,
            action=row.action,
            target=row.target,
            outcome=row.outcome,
            job_id=row.job_id,
            created_at=as_utc(row.created_at),
        )
        for row in rows
    ]
