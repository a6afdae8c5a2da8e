"""Webhooks: ``webhook_endpoints`` (a tenant's receivers, deleted with the tenant) and
``webhook_deliveries`` (the outbox: one row per event and endpoint, written in the transaction
that ends the job it reports, deleted with its endpoint or its erased session)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from om_workers.store.migrations.parts import JSON, TIMESTAMP, owned_by

revision: str = "0013"
down_revision: str | None = "0012"


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("event_types", JSON, nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_endpoints"),
        owned_by("webhook_endpoints", "tenant_id", "tenants.id"),
    )
    op.create_index("ix_webhook_endpoints_tenant_id", "webhook_endpoints", ["tenant_id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("endpoint_id", sa.String(32), nullable=False),
        sa.Column("event_type", sa.String(32), nullable=False),
        sa.Column("session_id", sa.String(256), nullable=True),
        sa.Column("source_id", sa.String(64), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("next_attempt_at", TIMESTAMP, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("delivered_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
        owned_by("webhook_deliveries", "endpoint_id", "webhook_endpoints.id"),
    )
    for name, columns in (
        ("ix_webhook_deliveries_endpoint_id_created_at", ["endpoint_id", "created_at"]),
        ("ix_webhook_deliveries_next_attempt_at", ["next_attempt_at"]),
        ("ix_webhook_deliveries_tenant_id_session_id", ["tenant_id", "session_id"]),
        ("ix_webhook_deliveries_source_id", ["source_id"]),
    ):
        op.create_index(name, "webhook_deliveries", columns)


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_endpoints")
