"""A flush job's ``prompt_version``: which observer/reflector instructions its flush used.

Recorded when the job finishes (``om_core.flush.prompts``; ``custom`` when instructions came from
the memory settings), so jobs under two prompt versions can be told apart and compared.
"""

from __future__ import annotations

import sqlalchemy as sa

from om_workers.store.migrations.parts import NullableColumn

revision: str = "0009"
down_revision: str | None = "0008"

_PROMPT_VERSION = NullableColumn("flush_jobs", "prompt_version", sa.String(64))


def upgrade() -> None:
    _PROMPT_VERSION.add()


def downgrade() -> None:
    _PROMPT_VERSION.drop()
