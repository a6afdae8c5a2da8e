"""Tombstones: entry ids a scope withholds from reads and flushes (revocations write them)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import insert, select, update

from om_workers.store.accounts import require_tenant
from om_workers.store.base import StoreBase
from om_workers.store.records import Tombstone, as_utc
from om_workers.store.schema import tombstones


def tombstone_scope(session_id: str) -> str:
    """The tombstone scope of one session: revocations write it, reads and flushes withhold it.

    Entry ids are unique per tenant, so a per-session scope loses nothing and keeps one
    session's revocations from costing another session's reads.
    """
    return f"session:{session_id}"


class TombstonesMixin(StoreBase):
    """Tombstone operations of :class:`~om_workers.store.SqlStore`."""

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
