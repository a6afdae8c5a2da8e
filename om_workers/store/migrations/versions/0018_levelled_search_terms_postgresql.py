"""PostgreSQL: the full-text index holds levelled terms (``lexeme_level``), as SQLite's does.

``ts_rank`` has no IDF and no top-k pruning: a tenant-wide search whose words were common
ranked tens of thousands of rows of a million-message tenant (p99 in the hundreds of
milliseconds). Each row's stored lexemes (``search_terms``, revision ``0016``) become
``search_levels``: per distinct lexeme of the text, one lexeme naming it and its BM25
weight's level, as ``om_core.read.search_terms.level_of`` computes it (the same float
arithmetic, so a count and a length give the same level in both stores). A search then reads
the rows of each combination of levels best score first and stops after a page
(``om_core.read.search_plan``), as on SQLite.

The GIN indexes are written at each insert (``fastupdate = off``), not through a pending
list: every GIN scan reads the whole list, and its pages made the planner price a lookup of a
rare term above a sequential scan that stops at the first match, which read every row when
none matched (two seconds a search on a million rows with 239 pending pages). It costs appends
some time (measured in ``docs/search.md``).

``om_levelled_terms`` is IMMUTABLE (a function of its arguments alone), so the column is a
stored generated one: computed by PostgreSQL on every insert and update, it cannot drift.
The upgrade rewrites ``entries`` and ``memory_items`` (about a minute and a half for a
million messages here; writes wait meanwhile), then analyses them: a search weighs its words by
the column's statistics, and counts them row by row until there are some. SQLite is unchanged.
"""

from __future__ import annotations

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"

# level_of(count, words): min(7, int(weight / (K1 + 1) * LEVELS)), weight = count * (K1 + 1) /
# (count + K1 * (1 - B + B * words / TYPICAL_WORDS)), in float8 and in Python's order.
_NORM = "1.2::float8 * (1 - 0.75::float8 + 0.75::float8 * w.words / 24)"
_WEIGHT = f"t.n * (1.2::float8 + 1) / (t.n + {_NORM})"
_LEVEL = f"least(7, trunc(({_WEIGHT}) / (1.2::float8 + 1) * 8))::int"
_FUNCTION = f"""CREATE FUNCTION om_levelled_terms(terms tsvector) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_to_tsvector(coalesce(array_agg(t.lexeme || '_' || {_LEVEL}), '{{}}'))
    FROM (SELECT lexeme, cardinality(positions) AS n FROM unnest(terms)) AS t,
        (SELECT coalesce(sum(cardinality(positions)), 0) AS words FROM unnest(terms)) AS w
    $$"""
_ENTRY_LEXEMES = "to_tsvector('english'::regconfig, om_message_text(payload))"
_MEMORY_LEXEMES = "to_tsvector('english'::regconfig, payload ->> 'text')"

_UP = [
    _FUNCTION,
    "ALTER TABLE entries DROP COLUMN search_terms",
    "ALTER TABLE entries ADD COLUMN search_levels tsvector GENERATED ALWAYS AS ("
    f"CASE WHEN kind = 'message' THEN om_levelled_terms({_ENTRY_LEXEMES}) END) STORED",
    "CREATE INDEX ix_entries_search_levels ON entries USING gin (search_levels) "
    "WITH (fastupdate = off) WHERE kind = 'message'",
    "ALTER TABLE memory_items DROP COLUMN search_terms",
    "ALTER TABLE memory_items ADD COLUMN search_levels tsvector GENERATED ALWAYS AS ("
    f"om_levelled_terms({_MEMORY_LEXEMES})) STORED",
    "CREATE INDEX ix_memory_items_search_levels ON memory_items USING gin (search_levels) "
    "WITH (fastupdate = off)",
    "ANALYZE entries, memory_items",
]
_DOWN = [
    "ALTER TABLE memory_items DROP COLUMN search_levels",
    "ALTER TABLE memory_items ADD COLUMN search_terms tsvector GENERATED ALWAYS AS ("
    f"{_MEMORY_LEXEMES}) STORED",
    "CREATE INDEX ix_memory_items_search_terms ON memory_items USING gin (search_terms)",
    "ALTER TABLE entries DROP COLUMN search_levels",
    "ALTER TABLE entries ADD COLUMN search_terms tsvector GENERATED ALWAYS AS ("
    f"CASE WHEN kind = 'message' THEN {_ENTRY_LEXEMES} END) STORED",
    "CREATE INDEX ix_entries_search_terms ON entries USING gin (search_terms) "
    "WHERE kind = 'message'",
    "DROP FUNCTION om_levelled_terms(tsvector)",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in _UP:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in _DOWN:
            op.execute(statement)
