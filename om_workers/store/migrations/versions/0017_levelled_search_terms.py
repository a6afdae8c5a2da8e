"""SQLite: the full-text index holds levelled terms (``stem_level``), not the text's words.

FTS5 ranks by ``bm25()`` with no top-k pruning: every row a query's words name is scored, and
every statement counts each word's rows in the whole index again, so a tenant-wide search of
common words over a million messages took hundreds of milliseconds whatever its page. Each row
now holds, per distinct stem of its text, one term naming the stem and its BM25 weight's level
(``om_core.read.search_terms``), computed by ``om_index_terms`` (a function each connection of
the store registers, ``om_workers.store.search_terms_sql``); a search reads the rows of each
combination of levels best score first and stops after a page (``om_core.read.search_plan``).
The index keeps no positions (``detail=none``): a query is a bag of words.

A message row also holds its tenant's term, for a tenant-wide search of a small tenant.

The upgrade rebuilds both FTS5 tables from the stored rows in its transaction (about 20 s for
a million messages here; writers wait meanwhile). PostgreSQL is unchanged.
"""

from __future__ import annotations

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"

_ENTRY_TEXT = """
    CASE json_type({p}, '$.message.content')
        WHEN 'text' THEN json_extract({p}, '$.message.content')
        WHEN 'array' THEN (
            SELECT group_concat(json_extract(part.value, '$.text'), char(10))
            FROM json_each({p}, '$.message.content') AS part
        )
        ELSE ''
    END
"""
_ROWID = "({r}.session_pk * 4294967296 + {r}.seq)"
_MEMORY_TEXT = "json_extract({p}, '$.text')"
_ENTRY_TERMS = "om_index_terms(" + _ENTRY_TEXT + ", {r}.tenant_id)"
_MEMORY_TERMS = "om_index_terms(" + _MEMORY_TEXT + ", NULL)"
_OPTIONS = "content='', detail=none, tokenize=\"ascii tokenchars '_'\""

_DROP_0012 = [
    "DROP TRIGGER memory_fts_update",
    "DROP TRIGGER memory_fts_delete",
    "DROP TRIGGER memory_fts_insert",
    "DROP TRIGGER entries_fts_update",
    "DROP TRIGGER entries_fts_delete",
    "DROP TRIGGER entries_fts_insert",
    "DROP TABLE entries_fts_vocab",
    "DROP TABLE memory_fts",
    "DROP TABLE entries_fts",
]


def _triggers(entry: str, memory: str, columns: str, memory_column: str) -> list[str]:
    """The six triggers keeping both tables, given the entry and memory values (formatted
    with ``r``/``p`` for the row and its payload) and the tables' columns."""

    def entry_of(r: str) -> str:
        return entry.format(r=r, p=f"{r}.payload")

    def memory_of(r: str) -> str:
        return memory.format(r=r, p=f"{r}.payload")

    rowid = _ROWID.format
    return [
        f"""CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries
            WHEN new.kind = 'message' BEGIN
            INSERT INTO entries_fts(rowid, {columns}) VALUES ({rowid(r="new")}, {entry_of("new")});
        END""",
        f"""CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries
            WHEN old.kind = 'message' BEGIN
            INSERT INTO entries_fts(entries_fts, rowid, {columns})
                VALUES ('delete', {rowid(r="old")}, {entry_of("old")});
        END""",
        f"""CREATE TRIGGER entries_fts_update
            AFTER UPDATE OF payload, kind, seq, tenant_id ON entries BEGIN
            INSERT INTO entries_fts(entries_fts, rowid, {columns})
                SELECT 'delete', {rowid(r="old")}, {entry_of("old")} WHERE old.kind = 'message';
            INSERT INTO entries_fts(rowid, {columns})
                SELECT {rowid(r="new")}, {entry_of("new")} WHERE new.kind = 'message';
        END""",
        f"""CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory_items BEGIN
            INSERT INTO memory_fts(rowid, {memory_column})
                VALUES (new.rowid, {memory_of("new")});
        END""",
        f"""CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory_items BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, {memory_column})
                VALUES ('delete', old.rowid, {memory_of("old")});
        END""",
        f"""CREATE TRIGGER memory_fts_update AFTER UPDATE OF payload ON memory_items BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, {memory_column})
                VALUES ('delete', old.rowid, {memory_of("old")});
            INSERT INTO memory_fts(rowid, {memory_column})
                VALUES (new.rowid, {memory_of("new")});
        END""",
    ]


_UP = [
    *_DROP_0012,
    f"CREATE VIRTUAL TABLE entries_fts USING fts5(terms, {_OPTIONS})",
    f"CREATE VIRTUAL TABLE memory_fts USING fts5(terms, {_OPTIONS})",
    # Rows per term: a search's IDFs and which levels of a stem exist.
    "CREATE VIRTUAL TABLE entries_fts_vocab USING fts5vocab(entries_fts, 'row')",
    "CREATE VIRTUAL TABLE memory_fts_vocab USING fts5vocab(memory_fts, 'row')",
    *_triggers(_ENTRY_TERMS, _MEMORY_TERMS, "terms", "terms"),
    f"""INSERT INTO entries_fts(rowid, terms)
        SELECT {_ROWID.format(r="e")}, {_ENTRY_TERMS.format(r="e", p="e.payload")}
        FROM entries AS e WHERE e.kind = 'message'""",
    f"""INSERT INTO memory_fts(rowid, terms)
        SELECT m.rowid, {_MEMORY_TERMS.format(p="m.payload")} FROM memory_items AS m""",
]

# Back to revision 0012's tables (the text's words, Porter-stemmed, and the tenant's id).
_DOWN = [
    *_DROP_0012,
    "DROP TABLE memory_fts_vocab",
    "CREATE VIRTUAL TABLE entries_fts USING fts5("
    "body, tenant, content='', tokenize='porter unicode61')",
    "INSERT INTO entries_fts(entries_fts, rank) VALUES ('rank', 'bm25(1.0, 0.0)')",
    "CREATE VIRTUAL TABLE memory_fts USING fts5(body, content='', tokenize='porter unicode61')",
    "CREATE VIRTUAL TABLE entries_fts_vocab USING fts5vocab(entries_fts, 'row')",
    *_triggers(_ENTRY_TEXT + ", hex({r}.tenant_id)", _MEMORY_TEXT, "body, tenant", "body"),
    f"""INSERT INTO entries_fts(rowid, body, tenant)
        SELECT {_ROWID.format(r="e")}, {_ENTRY_TEXT.format(p="e.payload")}, hex(e.tenant_id)
        FROM entries AS e WHERE e.kind = 'message'""",
    f"""INSERT INTO memory_fts(rowid, body)
        SELECT m.rowid, {_MEMORY_TEXT.format(p="m.payload")} FROM memory_items AS m""",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in _UP:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in _DOWN:
            op.execute(statement)
