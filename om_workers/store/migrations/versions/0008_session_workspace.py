"""The delegation funnel's link: ``sessions.workspace_id``, and an index to find a workspace's
linked sessions.

``workspace_id`` names a session of the same tenant that receives a copy of every observable
message appended to this one (``om_workers/store/funnel.py``); ``NULL`` (every existing
session) means not linked. ``(tenant_id, workspace_id)`` answers "is this session a workspace?"
when a link is made, since funnels do not chain.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from om_workers.store.migrations.parts import NullableColumn

revision: str = "0008"
down_revision: str | None = "0007"

_WORKSPACE_ID = NullableColumn("sessions", "workspace_id", sa.String(256))


def upgrade() -> None:
    _WORKSPACE_ID.add()
    op.create_index("ix_sessions_tenant_id_workspace_id", "sessions", ["tenant_id", "workspace_id"])


def downgrade() -> None:
    op.drop_index("ix_sessions_tenant_id_workspace_id", table_name="sessions")
    _WORKSPACE_ID.drop()
