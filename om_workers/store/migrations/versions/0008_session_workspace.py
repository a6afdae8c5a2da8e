"""The delegation funnel's link: ``sessions.workspace_id``, and an index to find a workspace's
linked sessions.

``workspace_id`` names a session of the same tenant that receives a copy of every observable
message appended to this one (``om_workers/store/funnel.py``); ``NULL`` (every existing
session) means not linked. ``(tenant_id, workspace_id)`` answers "is this session a workspace?"
when a link is made, since funnels do not chain.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A nullable column without a default: an instant change on both SQLite and PostgreSQL.
    op.add_column("sessions", sa.Column("workspace_id", sa.String(256), nullable=True))
    op.create_index("ix_sessions_tenant_id_workspace_id", "sessions", ["tenant_id", "workspace_id"])


def downgrade() -> None:
    op.drop_index("ix_sessions_tenant_id_workspace_id", table_name="sessions")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("workspace_id")
