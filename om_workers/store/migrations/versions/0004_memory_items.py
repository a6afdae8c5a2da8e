"""Snapshot items: a session's observations and reflections become rows.

The snapshot kept the whole folded ledger in one JSON value, so every memory write rewrote
(and every flush parsed) all of a long session's memory. The row now keeps the cursors and the
scope map; each observation and reflection is a ``memory_items`` row, written once, its
``pending`` flag and ``dropped_ord`` updated in place. Existing snapshots are converted.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from om_workers.store.migrations.parts import JSON, KEY, owned_by

revision: str = "0004"
down_revision: str | None = "0003"


def upgrade() -> None:
    items = op.create_table(
        "memory_items",
        sa.Column("session_pk", KEY, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("item_id", sa.String(256), nullable=False),
        sa.Column("ord", sa.BigInteger(), nullable=False),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("pending", sa.Boolean(), nullable=False),
        sa.Column("dropped_ord", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("session_pk", "kind", "item_id", name="pk_memory_items"),
        owned_by("memory_items", "session_pk", "sessions.pk"),
    )
    op.create_index(
        "ix_memory_items_active", "memory_items", ["session_pk", "kind", "dropped_ord", "ord"]
    )
    with op.batch_alter_table("snapshots") as batch:
        batch.add_column(sa.Column("observation_cursor", sa.String(256), nullable=True))
        batch.add_column(sa.Column("observation_cursor_seq", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("reflection_cursor", sa.String(256), nullable=True))
        batch.add_column(sa.Column("next_ord", sa.BigInteger(), nullable=True))
    _convert(items)
    with op.batch_alter_table("snapshots") as batch:
        batch.alter_column("observation_cursor_seq", existing_type=sa.BigInteger(), nullable=False)
        batch.alter_column("next_ord", existing_type=sa.BigInteger(), nullable=False)
        batch.drop_column("ledger")


def _convert(items: sa.Table) -> None:
    bind = op.get_bind()
    snapshots = sa.table(
        "snapshots",
        sa.column("session_pk"),
        sa.column("ledger", JSON),
        sa.column("observation_cursor"),
        sa.column("observation_cursor_seq"),
        sa.column("reflection_cursor"),
        sa.column("next_ord"),
    )
    for row in bind.execute(sa.select(snapshots.c.session_pk, snapshots.c.ledger)).all():
        rows, next_ord = _item_rows(int(row.session_pk), row.ledger or {})
        if rows:
            bind.execute(sa.insert(items), rows)
        bind.execute(
            sa.update(snapshots)
            .where(snapshots.c.session_pk == row.session_pk)
            .values(
                observation_cursor=(row.ledger or {}).get("observationCoversUpToId"),
                # 0 reads from the root once: always right, and the next write sets the seq.
                observation_cursor_seq=0,
                reflection_cursor=(row.ledger or {}).get("reflectionCoversUpToId"),
                next_ord=next_ord,
            )
        )


def _item_rows(session_pk: int, ledger: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    pending = set(ledger.get("pendingReflectionObservationIds") or ())
    dropped = list(dict.fromkeys(ledger.get("droppedObservationIds") or ()))
    rows: list[dict[str, Any]] = []
    for kind, key in (("observation", "observations"), ("reflection", "reflections")):
        for item in ledger.get(key) or ():
            rows.append(
                {
                    "session_pk": session_pk,
                    "kind": kind,
                    "item_id": item["id"],
                    "ord": len(rows),
                    "payload": item,
                    "pending": kind == "observation" and item["id"] in pending,
                    "dropped_ord": None,
                }
            )
    next_ord = len(rows)
    by_id = {r["item_id"]: r for r in rows if r["kind"] == "observation"}
    for oid in dropped:
        if oid in by_id:
            by_id[oid]["dropped_ord"] = next_ord
            by_id[oid]["pending"] = False
            next_ord += 1
    return rows, next_ord


def downgrade() -> None:
    # The items are not folded back into a JSON ledger: snapshots are derived data, rebuilt
    # from the entries by the next memory write of each session.
    op.execute("DELETE FROM snapshots")
    with op.batch_alter_table("snapshots") as batch:
        batch.add_column(sa.Column("ledger", JSON, nullable=False))
        batch.drop_column("next_ord")
        batch.drop_column("reflection_cursor")
        batch.drop_column("observation_cursor_seq")
        batch.drop_column("observation_cursor")
    op.drop_index("ix_memory_items_active", table_name="memory_items")
    op.drop_table("memory_items")
