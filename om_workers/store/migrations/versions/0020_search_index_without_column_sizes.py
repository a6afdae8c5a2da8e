"""SQLite: the FTS5 tables keep no column sizes (``columnsize=0``).

FTS5 writes each row's token count into a ``<table>_docsize`` table of its own, one B-tree
insert beside every indexed message and memory item, read only by ranking functions such as
``bm25()``. The search scores its levelled terms itself (revision ``0017``) and never asks
for them, so the index stops writing them (appends spread over many sessions took about 6 %
less, docs/search.md). The size of a search's scope, for the choice of its plan, which the search
took from that table's last rowid in each session, is the sessions' entry count instead.

The upgrade recreates both FTS5 tables and indexes the stored rows again in its transaction
(4.8 s for 200,000 messages here, the process's start included; writers wait meanwhile).
PostgreSQL is unchanged.
"""

from __future__ import annotations

from alembic import op

from om_workers.store.search_index import refill_sqlite

revision: str = "0020"
down_revision: str | None = "0019"

_OPTIONS = "content='', detail=none, tokenize=\"ascii tokenchars '_'\""


def _recreate(options: str) -> None:
    """Both FTS5 tables (and their vocabularies) created again with ``options``, refilled.
    The triggers that keep them are on ``entries`` and ``memory_items``, and stay."""
    for table in ("entries_fts", "memory_fts"):
        op.execute(f"DROP TABLE {table}_vocab")
        op.execute(f"DROP TABLE {table}")
        op.execute(f"CREATE VIRTUAL TABLE {table} USING fts5(terms, {options})")
        op.execute(f"CREATE VIRTUAL TABLE {table}_vocab USING fts5vocab({table}, 'row')")
    refill_sqlite(op.get_bind())


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _recreate(f"{_OPTIONS}, columnsize=0")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _recreate(_OPTIONS)
