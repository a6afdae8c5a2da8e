"""Tenants for section 15's narrowing rows: the same narrowed search in a tenant of 1,000
sessions and in one of 100,000, so that what finding the matching sessions costs shows as the
ratio (it must not grow with the tenant's sessions).

The sessions are inserted as rows in bulk, and their metadata pairs by the store's own
:func:`~om_workers.store.repositories.metadata_pairs.write_pairs`: creating 100,000 through
the store would take minutes and measure nothing this section is about.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import insert, select

from om_core.read.search_narrowing import MetadataNarrowing
from om_workers.store import AccountStore, SqlStore
from om_workers.store.repositories.metadata_pairs import write_pairs
from om_workers.store.schema import sessions

SESSION_COUNTS = (1_000, 100_000)
"""The two tenants' sizes, in sessions."""
MATCHING = 10
"""Sessions of each tenant the narrowing matches."""
_CHUNK = 5_000


def narrowed_tenant(store: SqlStore, count: int) -> tuple[str, MetadataNarrowing, list[str]]:
    """A new tenant of ``count`` empty sessions, each of a ``group`` (:data:`MATCHING` sessions
    a group): the tenant's id, the narrowing to one group, and that group's session ids."""
    tenant = AccountStore(store.engine).create_tenant(f"narrowed-{count}").id
    groups = count // MATCHING
    now = datetime.now(UTC)
    metas = [{"group": f"g{n % groups}", "subject": f"user-{n}"} for n in range(count)]
    rows = [
        {
            "tenant_id": tenant,
            "id": f"{tenant}-{n}",
            "leaf_id": None,
            "epoch": 0,
            "entry_count": 0,
            "unobserved_tokens": 0,
            "meta": metas[n],
            "created_at": now,
            "updated_at": now,
        }
        for n in range(count)
    ]
    with store.engine.begin() as connection:
        for at in range(0, count, _CHUNK):
            connection.execute(insert(sessions), rows[at : at + _CHUNK])
        found = connection.execute(
            select(sessions.c.id, sessions.c.pk).where(sessions.c.tenant_id == tenant)
        )
        keys = {row.id: row.pk for row in found}
        for row, meta in zip(rows, metas, strict=True):
            write_pairs(connection, tenant, keys[row["id"]], meta)
    matching = [f"{tenant}-{n}" for n in range(7, count, groups)]
    return tenant, MetadataNarrowing((("group", "g7"),)), matching
