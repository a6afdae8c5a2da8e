"""``session_metadata_pairs``: the metadata pairs a tenant-wide search can be narrowed by.

Finding the sessions of ``GET /v1/search?metadata=key:value`` read every session of the
tenant and looked into its JSON (37 ms for 100,000 sessions on SQLite, 17 ms on PostgreSQL,
growing with them). One row per pair a narrowing can name (a top-level key of 1-128 letters,
digits, ``_``, ``.`` or ``-`` whose value is a string of at most 256 characters, as
``om_core.read.search_narrowing.narrowable_pairs`` chooses them), keyed by tenant, key and
value, turns that into a range scan of the matching sessions.

The rows of the sessions already stored are written here in SQL, each store's own JSON
functions choosing the same pairs (a test compares them with what the store writes for a new
session). Erased sessions (``erased_at`` set) get none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from om_workers.store.migrations.parts import KEY, owned_by

revision: str = "0019"
down_revision: str | None = "0018"

_COPY = {
    "sqlite": """INSERT INTO session_metadata_pairs (tenant_id, key, value, session_pk)
        SELECT s.tenant_id, j.key, j.value, s.pk FROM sessions AS s, json_each(s.meta) AS j
        WHERE s.erased_at IS NULL AND json_type(s.meta) = 'object' AND j.type = 'text'
            AND length(j.key) BETWEEN 1 AND 128 AND j.key NOT GLOB '*[^A-Za-z0-9_.-]*'
            AND length(j.value) <= 256""",
    "postgresql": """INSERT INTO session_metadata_pairs (tenant_id, key, value, session_pk)
        SELECT s.tenant_id, j.key, j.value #>> '{}', s.pk FROM sessions AS s,
            jsonb_each(CASE WHEN jsonb_typeof(s.meta) = 'object' THEN s.meta END) AS j
        WHERE s.erased_at IS NULL AND jsonb_typeof(j.value) = 'string'
            AND j.key ~ '^[A-Za-z0-9_.-]{1,128}$' AND length(j.value #>> '{}') <= 256""",
}


def upgrade() -> None:
    op.create_table(
        "session_metadata_pairs",
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("value", sa.String(256), nullable=False),
        sa.Column("session_pk", KEY, nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant_id", "key", "value", "session_pk", name="pk_session_metadata_pairs"
        ),
        owned_by("session_metadata_pairs", "session_pk", "sessions.pk"),
    )
    op.create_index(
        "ix_session_metadata_pairs_session_pk", "session_metadata_pairs", ["session_pk"]
    )
    op.execute(_COPY[op.get_bind().dialect.name])


def downgrade() -> None:
    op.drop_index("ix_session_metadata_pairs_session_pk", table_name="session_metadata_pairs")
    op.drop_table("session_metadata_pairs")
