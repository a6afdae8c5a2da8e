"""The SQLite message index merges its segments sixteen at a time.

FTS5 writes a segment at the end of every statement that touched it (one per append) and
merges the segments of a level once ``automerge`` of them (4 by default) are there, so a
posting is rewritten once per level, levels growing fourfold; with ``secure_delete`` on, the
pages a merge frees are zeroed too. Sixteen at a time halves the levels and the rewrites:
FTS5 alone spent about an eighth less CPU indexing 20,000 messages appended 100 at a time,
and the search bench's queries cost the same CPU on a 100k-entry session and a 1M-entry
tenant (a level holds more segments, but few enough that a word's rows are found as fast).
The setting lives in the table's own configuration, so ``om search reindex`` keeps it.

PostgreSQL's GIN indexes have no such setting: nothing to do there.
"""

from __future__ import annotations

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"


def _automerge(segments: int) -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"INSERT INTO entries_fts(entries_fts, rank) VALUES ('automerge', {segments})")


def upgrade() -> None:
    _automerge(16)


def downgrade() -> None:
    _automerge(4)
