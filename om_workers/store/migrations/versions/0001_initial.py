"""Initial schema: tenants, API keys, sessions, entries, snapshots, flush jobs, tombstones.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the types this revision creates: later schema edits must not change it.
_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_JSON = sa.JSON().with_variant(JSONB(), "postgresql")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tenants"),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("label", sa.String(256), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("revoked_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name="fk_api_keys_tenant_id_tenants",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("key_hash", name="uq_api_keys_key_hash"),
    )
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"])
    op.create_table(
        "sessions",
        sa.Column("pk", _KEY, autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("id", sa.String(256), nullable=False),
        sa.Column("leaf_id", sa.String(256), nullable=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("entry_count", sa.BigInteger(), nullable=False),
        sa.Column("unobserved_tokens", sa.BigInteger(), nullable=False),
        sa.Column("meta", _JSON, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("pk", name="pk_sessions"),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name="fk_sessions_tenant_id_tenants",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("tenant_id", "id", name="uq_sessions_tenant_id_id"),
    )
    op.create_table(
        "entries",
        sa.Column("id", sa.String(256), nullable=False),
        sa.Column("session_pk", _KEY, nullable=False),
        sa.Column("parent_id", sa.String(256), nullable=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("run_start", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("eligible_tokens", sa.BigInteger(), nullable=False),
        sa.Column("payload", _JSON, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_entries"),
        sa.ForeignKeyConstraint(
            ["session_pk"],
            ["sessions.pk"],
            name="fk_entries_session_pk_sessions",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("session_pk", "seq", name="uq_entries_session_pk_seq"),
    )
    op.create_table(
        "snapshots",
        sa.Column("session_pk", _KEY, nullable=False),
        sa.Column("entry_id", sa.String(256), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("ledger", _JSON, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("session_pk", name="pk_snapshots"),
        sa.ForeignKeyConstraint(
            ["session_pk"],
            ["sessions.pk"],
            name="fk_snapshots_session_pk_sessions",
            ondelete="CASCADE",
        ),
    )
    op.create_table(
        "flush_runs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("session_pk", _KEY, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("force", sa.Boolean(), nullable=False),
        sa.Column("full_reflection_rebuild", sa.Boolean(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("queued_at", _TS, nullable=False),
        sa.Column("started_at", _TS, nullable=True),
        sa.Column("finished_at", _TS, nullable=True),
        sa.Column("counts", _JSON, nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_flush_runs"),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name="fk_flush_runs_tenant_id_tenants",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["session_pk"],
            ["sessions.pk"],
            name="fk_flush_runs_session_pk_sessions",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_flush_runs_session_pk_queued_at", "flush_runs", ["session_pk", "queued_at"])
    op.create_index("ix_flush_runs_state_started_at", "flush_runs", ["state", "started_at"])
    op.create_table(
        "tombstones",
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("scope", sa.String(256), nullable=False),
        sa.Column("entry_id", sa.String(256), nullable=False),
        sa.Column("corrected", sa.Boolean(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "scope", "entry_id", name="pk_tombstones"),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name="fk_tombstones_tenant_id_tenants",
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    for table in ("tombstones", "flush_runs", "snapshots", "entries", "sessions", "api_keys"):
        op.drop_table(table)
    op.drop_table("tenants")
