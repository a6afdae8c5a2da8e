"""A tenant's rate-limit overrides: ``tenants.rate_limits`` (JSON, NULL: the defaults).

Set by an admin (``PUT /v1/admin/tenants/{id}/limits``, ``om tenants limits``); the API
replaces the ``OM_RATE_*`` defaults with them per request class.
"""

from __future__ import annotations

from om_workers.store.migrations.parts import JSON, NullableColumn

revision: str = "0010"
down_revision: str | None = "0009"


_RATE_LIMITS = NullableColumn("tenants", "rate_limits", JSON)


def upgrade() -> None:
    _RATE_LIMITS.add()


def downgrade() -> None:
    _RATE_LIMITS.drop()
