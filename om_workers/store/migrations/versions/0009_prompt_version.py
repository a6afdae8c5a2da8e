"""A flush job's ``prompt_version``: which observer/reflector instructions its flush used.

Recorded when the job finishes (``om_core.flush.prompts``; ``custom`` when instructions came from
the memory settings), so jobs under two prompt versions can be told apart and compared.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("flush_jobs", sa.Column("prompt_version", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("flush_jobs") as batch:
        batch.drop_column("prompt_version")
