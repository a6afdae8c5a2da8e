"""An index for listing a tenant's sessions newest first (``GET /v1/sessions``).

``(tenant_id, created_at, id)``: a page is one range scan inside the tenant, read backwards
for the newest-first order, whatever other tenants hold (see ``om_workers/store/listing.py``).
"""

from __future__ import annotations

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"


def upgrade() -> None:
    op.create_index(
        "ix_sessions_tenant_id_created_at_id", "sessions", ["tenant_id", "created_at", "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_sessions_tenant_id_created_at_id", table_name="sessions")
