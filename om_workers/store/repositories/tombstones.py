"""Tombstones: entry ids a scope withholds from reads and flushes (revocations write them)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, bindparam, insert, select, update

from om_workers.store.memory_view import WITHHELD
from om_workers.store.records import StoredTombstone, as_utc
from om_workers.store.schema import tombstones

_THIS_SCOPE = (
    tombstones.c.tenant_id == bindparam("tenant_id"),
    tombstones.c.scope == bindparam("scope"),
)
_LIST = (
    select(tombstones).where(*_THIS_SCOPE).order_by(tombstones.c.created_at, tombstones.c.entry_id)
)
_INSERT = insert(tombstones)
_CORRECTED = (
    update(tombstones)
    # An UPDATE may not bind a parameter named like one of its table's columns.
    .where(
        tombstones.c.tenant_id == bindparam("tenant"),
        tombstones.c.scope == bindparam("in_scope"),
        tombstones.c.entry_id.in_(bindparam("ids", expanding=True)),
    )
    .values(corrected=bindparam("new_corrected"))
)


def tombstone_scope(session_id: str) -> str:
    """The tombstone scope of one session: revocations write it, reads and flushes withhold it.

    Entry ids are unique per tenant, so a per-session scope loses nothing and keeps one
    session's revocations from costing another session's reads.
    """
    return f"session:{session_id}"


class TombstoneRepository:
    """A tenant's tombstones, on one unit of work's connection; one exact scope at a time."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def withheld(self, tenant_id: str, scope: str) -> frozenset[str]:
        """Entry ids the scope withholds, ``corrected`` ones included."""
        params = {"tenant_id": tenant_id, "scope": scope}
        return frozenset(WITHHELD.scalars(self._connection, params))

    def of_scope(self, tenant_id: str, scope: str) -> tuple[StoredTombstone, ...]:
        """The scope's tombstones, oldest first."""
        rows = self._connection.execute(_LIST, {"tenant_id": tenant_id, "scope": scope})
        return tuple(
            StoredTombstone(
                tenant_id=row.tenant_id,
                scope=row.scope,
                entry_id=row.entry_id,
                corrected=bool(row.corrected),
                created_at=as_utc(row.created_at),
            )
            for row in rows
        )

    def insert(
        self,
        tenant_id: str,
        scope: str,
        entry_ids: Sequence[str],
        *,
        corrected: bool,
        now: datetime,
    ) -> None:
        """Withhold ids the scope does not withhold yet."""
        self._connection.execute(
            _INSERT,
            [
                {
                    "tenant_id": tenant_id,
                    "scope": scope,
                    "entry_id": entry_id,
                    "corrected": corrected,
                    "created_at": now,
                }
                for entry_id in entry_ids
            ],
        )

    def set_corrected(
        self, tenant_id: str, scope: str, entry_ids: Sequence[str], *, corrected: bool
    ) -> None:
        """Set ``corrected`` on ids the scope already withholds."""
        params = {
            "tenant": tenant_id,
            "in_scope": scope,
            "ids": list(entry_ids),
            "new_corrected": corrected,
        }
        self._connection.execute(_CORRECTED, params)
