"""Model usage: ``model_usage``, one row per flush job and model with the calls' token counts
as the provider reported them.

Owned by the tenant (its erasure deletes the rows); linked to the session by ``session_pk``
with ``ON DELETE SET NULL``, so erasing a session keeps its counts in the tenant's totals
and drops the link.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from om_workers.store.migrations.parts import KEY, TIMESTAMP, owned_by

revision: str = "0014"
down_revision: str | None = "0013"


def upgrade() -> None:
    op.create_table(
        "model_usage",
        sa.Column("pk", KEY, autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("session_pk", KEY, nullable=True),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("pk", name="pk_model_usage"),
        owned_by("model_usage", "tenant_id", "tenants.id"),
        sa.ForeignKeyConstraint(
            ["session_pk"],
            ["sessions.pk"],
            name="fk_model_usage_session_pk_sessions",
            ondelete="SET NULL",
        ),
    )
    op.create_index("ix_model_usage_tenant_id_day", "model_usage", ["tenant_id", "day"])
    op.create_index("ix_model_usage_session_pk", "model_usage", ["session_pk"])
    op.create_index("ix_model_usage_job_id", "model_usage", ["job_id"])


def downgrade() -> None:
    op.drop_table("model_usage")
