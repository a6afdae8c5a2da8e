"""Initial schema: tenants, API keys, sessions, entries, snapshots, flush jobs, tombstones."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from om_workers.store.migrations.parts import JSON, KEY, TIMESTAMP, owned_by

revision: str = "0001"
down_revision: str | None = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tenants"),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("label", sa.String(256), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        owned_by("api_keys", "tenant_id", "tenants.id"),
        sa.UniqueConstraint("key_hash", name="uq_api_keys_key_hash"),
    )
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"])
    op.create_table(
        "sessions",
        sa.Column("pk", KEY, autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("id", sa.String(256), nullable=False),
        sa.Column("leaf_id", sa.String(256), nullable=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("entry_count", sa.BigInteger(), nullable=False),
        sa.Column("unobserved_tokens", sa.BigInteger(), nullable=False),
        sa.Column("meta", JSON, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("pk", name="pk_sessions"),
        owned_by("sessions", "tenant_id", "tenants.id"),
        sa.UniqueConstraint("tenant_id", "id", name="uq_sessions_tenant_id_id"),
    )
    op.create_table(
        "entries",
        sa.Column("id", sa.String(256), nullable=False),
        sa.Column("session_pk", KEY, nullable=False),
        sa.Column("parent_id", sa.String(256), nullable=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("run_start", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("eligible_tokens", sa.BigInteger(), nullable=False),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_entries"),
        owned_by("entries", "session_pk", "sessions.pk"),
        sa.UniqueConstraint("session_pk", "seq", name="uq_entries_session_pk_seq"),
    )
    op.create_table(
        "snapshots",
        sa.Column("session_pk", KEY, nullable=False),
        sa.Column("entry_id", sa.String(256), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("ledger", JSON, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("session_pk", name="pk_snapshots"),
        owned_by("snapshots", "session_pk", "sessions.pk"),
    )
    op.create_table(
        "flush_runs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("session_pk", KEY, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("force", sa.Boolean(), nullable=False),
        sa.Column("full_reflection_rebuild", sa.Boolean(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("queued_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.Column("counts", JSON, nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_flush_runs"),
        owned_by("flush_runs", "tenant_id", "tenants.id"),
        owned_by("flush_runs", "session_pk", "sessions.pk"),
    )
    op.create_index("ix_flush_runs_session_pk_queued_at", "flush_runs", ["session_pk", "queued_at"])
    op.create_index("ix_flush_runs_state_started_at", "flush_runs", ["state", "started_at"])
    op.create_table(
        "tombstones",
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("scope", sa.String(256), nullable=False),
        sa.Column("entry_id", sa.String(256), nullable=False),
        sa.Column("corrected", sa.Boolean(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "scope", "entry_id", name="pk_tombstones"),
        owned_by("tombstones", "tenant_id", "tenants.id"),
    )


def downgrade() -> None:
    for table in ("tombstones", "flush_runs", "snapshots", "entries", "sessions", "api_keys"):
        op.drop_table(table)
    op.drop_table("tenants")
