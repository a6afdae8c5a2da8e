"""Erasure, retention and the audit trail: ``sessions.erased_at``, ``tenants.retention_days``
and the tables ``erasure_jobs``, ``erasure_targets`` and ``audit_events``.

A session is hidden at once when it is erased (its row renamed, ``erased_at`` set) and deleted
by a worker afterwards; ``erasure_targets`` lists what a job still has to delete, so a killed
worker's erasure is finished by the reconciler. Neither new table has a key to ``tenants``:
a tenant's own erasure must leave its job and its audit record readable.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from om_workers.store.migrations.parts import JSON, KEY, TIMESTAMP, NullableColumn

revision: str = "0011"
down_revision: str | None = "0010"

_ERASED_AT = NullableColumn("sessions", "erased_at", TIMESTAMP)
_REWRITTEN_AT = NullableColumn("sessions", "rewritten_at", TIMESTAMP)
_RETENTION_DAYS = NullableColumn("tenants", "retention_days", sa.Integer())


def upgrade() -> None:
    _ERASED_AT.add()
    _REWRITTEN_AT.add()
    _RETENTION_DAYS.add()
    op.create_table(
        "erasure_jobs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("target", sa.String(256), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("queued_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.Column("touched_at", TIMESTAMP, nullable=True),
        sa.Column("counts", JSON, nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_erasure_jobs"),
    )
    op.create_index(
        "ix_erasure_jobs_tenant_id_kind_target", "erasure_jobs", ["tenant_id", "kind", "target"]
    )
    op.create_index("ix_erasure_jobs_state_queued_at", "erasure_jobs", ["state", "queued_at"])
    op.create_table(
        "erasure_targets",
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("session_pk", KEY, nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(256), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "session_pk", name="pk_erasure_targets"),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["erasure_jobs.id"],
            name="fk_erasure_targets_job_id_erasure_jobs",
            ondelete="CASCADE",
        ),
    )
    op.create_index(
        "ix_erasure_targets_tenant_id_session_id",
        "erasure_targets",
        ["tenant_id", "session_id"],
    )
    op.create_table(
        "audit_events",
        sa.Column("pk", KEY, autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=True),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.String(256), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("pk", name="pk_audit_events"),
    )
    op.create_index(
        "ix_audit_events_tenant_id_created_at", "audit_events", ["tenant_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_table("audit_events")
    op.drop_table("erasure_targets")
    op.drop_table("erasure_jobs")
    _RETENTION_DAYS.drop()
    _REWRITTEN_AT.drop()
    _ERASED_AT.drop()
