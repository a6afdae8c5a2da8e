"""Entry ids are unique per tenant, not across every tenant of the service.

With one global key, tenant B appending an id tenant A already used got a conflict: B could
neither use the id nor help learning that it existed. The key becomes ``(tenant_id, id)``;
lookups by session keep their own index.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"


def upgrade() -> None:
    with op.batch_alter_table("entries") as batch:
        batch.add_column(sa.Column("tenant_id", sa.String(128), nullable=True))
    op.execute(
        "UPDATE entries SET tenant_id = "
        "(SELECT sessions.tenant_id FROM sessions WHERE sessions.pk = entries.session_pk)"
    )
    with op.batch_alter_table("entries", recreate="always") as batch:
        batch.alter_column("tenant_id", existing_type=sa.String(128), nullable=False)
        batch.drop_constraint("pk_entries", type_="primary")
        batch.create_primary_key("pk_entries", ["tenant_id", "id"])
        batch.create_index("ix_entries_session_pk_id", ["session_pk", "id"])


def downgrade() -> None:
    with op.batch_alter_table("entries", recreate="always") as batch:
        batch.drop_index("ix_entries_session_pk_id")
        batch.drop_constraint("pk_entries", type_="primary")
        batch.create_primary_key("pk_entries", ["id"])
        batch.drop_column("tenant_id")
