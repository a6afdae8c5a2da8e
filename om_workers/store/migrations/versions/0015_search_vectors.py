"""Vectors for the optional semantic search: ``search_vectors``.

One row per embedded message entry (``source`` 0, ``position`` its ``seq``) or memory item
(``source`` 1, ``position`` its ``ord``), keyed like the full-text index's rows
(``session_pk * 2**32 + position``), with the item's id (a refreshed snapshot may give an
``ord`` to another item: a vector counts only while the ids agree), the model that made it,
and the floats (float32, little-endian). Rows go with their session (a key to ``sessions``,
deleted with it), so an erasure needs no step of its own for them.

Plain tables on both stores: ``sqlite-vec`` cannot be loaded by a Python whose ``sqlite3``
was built without extension loading, and ``pgvector`` is a server extension; scoring is an
exact cosine over the scope's vectors (see docs/search.md).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from om_workers.store.migrations.parts import KEY, owned_by

revision: str = "0015"
down_revision: str | None = "0014"


def upgrade() -> None:
    op.create_table(
        "search_vectors",
        sa.Column("session_pk", KEY, nullable=False),
        sa.Column("source", sa.SmallInteger(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("item_id", sa.String(256), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("dimension", sa.Integer(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("session_pk", "source", "position", name="pk_search_vectors"),
        owned_by("search_vectors", "session_pk", "sessions.pk"),
    )
    op.create_index("ix_search_vectors_tenant_id_model", "search_vectors", ["tenant_id", "model"])


def downgrade() -> None:
    op.drop_index("ix_search_vectors_tenant_id_model", table_name="search_vectors")
    op.drop_table("search_vectors")
