"""Snapshots keep the folded work-scope map next to the ledger.

Context reads start at the snapshot, and scope records are memory entries that lie before it,
so without the map a scoped session would render as if it had no scopes. Rows written before
this revision have no map; the store treats them as stale and refolds once.
"""

from __future__ import annotations

from om_workers.store.migrations.parts import JSON, NullableColumn

revision: str = "0002"
down_revision: str | None = "0001"


_SCOPE_MAP = NullableColumn("snapshots", "scope_map", JSON)


def upgrade() -> None:
    _SCOPE_MAP.add()


def downgrade() -> None:
    _SCOPE_MAP.drop()
