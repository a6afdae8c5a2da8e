"""A tenant's rate-limit overrides: ``tenants.rate_limits`` (JSON, NULL: the defaults).

Set by an admin (``PUT /v1/admin/tenants/{id}/limits``, ``om tenants limits``); the API
replaces the ``OM_RATE_*`` defaults with them per request class.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("tenants", sa.Column("rate_limits", _JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("rate_limits")
