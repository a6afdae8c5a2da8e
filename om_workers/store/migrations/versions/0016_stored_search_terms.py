"""PostgreSQL: the full-text index's lexemes stored with each row (``search_terms``).

Revision ``0012`` indexed ``to_tsvector(...)`` of the text with expression GIN indexes. The
index finds the matching rows, but ranking them (``ts_rank``) and rechecking them needs each
row's ``tsvector``, which PostgreSQL then computes again from the JSON payload for every
match: a session search whose words are common ranked about 94,000 rows of a 100,000-entry
session in 1.3 s. A stored generated column holds that ``tsvector`` (computed by PostgreSQL
on every insert and update, so it cannot drift), and the GIN indexes cover the column.

Adding a stored generated column rewrites the table, computing every row's lexemes: on a
large PostgreSQL store this upgrade takes minutes and blocks writes to ``entries`` and
``memory_items`` meanwhile (about 5 s for 100,000 entries here). SQLite is unchanged (its
FTS5 tables keep their own postings).
"""

from __future__ import annotations

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"

_PG_UP = [
    "ALTER TABLE entries ADD COLUMN search_terms tsvector GENERATED ALWAYS AS ("
    "CASE WHEN kind = 'message' "
    "THEN to_tsvector('english'::regconfig, om_message_text(payload)) END) STORED",
    "CREATE INDEX ix_entries_search_terms ON entries USING gin (search_terms) "
    "WHERE kind = 'message'",
    "DROP INDEX ix_entries_search",
    "ALTER TABLE memory_items ADD COLUMN search_terms tsvector GENERATED ALWAYS AS ("
    "to_tsvector('english'::regconfig, payload ->> 'text')) STORED",
    "CREATE INDEX ix_memory_items_search_terms ON memory_items USING gin (search_terms)",
    "DROP INDEX ix_memory_items_search",
]
_PG_DOWN = [
    "CREATE INDEX ix_memory_items_search ON memory_items USING gin "
    "(to_tsvector('english'::regconfig, payload ->> 'text'))",
    "ALTER TABLE memory_items DROP COLUMN search_terms",
    "CREATE INDEX ix_entries_search ON entries USING gin "
    "(to_tsvector('english'::regconfig, om_message_text(payload))) WHERE kind = 'message'",
    "ALTER TABLE entries DROP COLUMN search_terms",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in _PG_UP:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in _PG_DOWN:
            op.execute(statement)
