"""A flush job's ``reason``: why a job that recorded nothing did nothing."""

from __future__ import annotations

import sqlalchemy as sa

from om_workers.store.migrations.parts import NullableColumn

revision: str = "0006"
down_revision: str | None = "0005"

_REASON = NullableColumn("flush_jobs", "reason", sa.Text())


def upgrade() -> None:
    _REASON.add()


def downgrade() -> None:
    _REASON.drop()
