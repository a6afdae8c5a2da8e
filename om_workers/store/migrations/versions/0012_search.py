"""Full-text search over message text and memory text, kept by the database itself.

SQLite: two contentless FTS5 tables (``porter unicode61``), written by triggers on
``entries`` and ``memory_items`` in the statement's own transaction, so an append, a flush,
a snapshot refresh and an erasure (plain ``DELETE``) keep the index exact with no code of
their own. ``entries_fts``'s rowid is ``session_pk * 2**32 + seq`` (stable across ``VACUUM``,
and a session's rows are one rowid range); ``memory_fts``'s is the item row's rowid.

PostgreSQL: expression GIN indexes over ``to_tsvector('english', ...)`` of the same text; the
index is part of the table, so nothing can drift.

Existing rows are indexed by ``om search reindex`` on SQLite (this revision creates the
triggers only, so upgrading a large database stays instant); the PostgreSQL indexes are built
here, from the rows already present.
"""

from __future__ import annotations

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"

# Text of a message entry: its string content, or its text parts joined by newlines.
_SQLITE_ENTRY_TEXT = """
    CASE json_type({p}, '$.message.content')
        WHEN 'text' THEN json_extract({p}, '$.message.content')
        WHEN 'array' THEN (
            SELECT group_concat(json_extract(part.value, '$.text'), char(10))
            FROM json_each({p}, '$.message.content') AS part
        )
        ELSE ''
    END
"""
_SQLITE_ROWID = "({r}.session_pk * 4294967296 + {r}.seq)"
_SQLITE_MEMORY_TEXT = "json_extract({p}, '$.text')"

_SQLITE_UP = [
    # ``tenant`` holds one token per row (the tenant id in hex): a tenant-wide search ANDs it
    # in, so its cost follows the tenant's rows, not the whole index's. It weighs nothing in
    # the rank.
    "CREATE VIRTUAL TABLE entries_fts USING fts5("
    "body, tenant, content='', tokenize='porter unicode61')",
    "INSERT INTO entries_fts(entries_fts, rank) VALUES ('rank', 'bm25(1.0, 0.0)')",
    "CREATE VIRTUAL TABLE memory_fts USING fts5(body, content='', tokenize='porter unicode61')",
    # Per-term document counts: a search leaves out words in half the messages or more.
    "CREATE VIRTUAL TABLE entries_fts_vocab USING fts5vocab(entries_fts, 'row')",
    f"""CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries
        WHEN new.kind = 'message' BEGIN
        INSERT INTO entries_fts(rowid, body, tenant) VALUES (
            {_SQLITE_ROWID.format(r="new")}, {_SQLITE_ENTRY_TEXT.format(p="new.payload")},
            hex(new.tenant_id));
    END""",
    f"""CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries
        WHEN old.kind = 'message' BEGIN
        INSERT INTO entries_fts(entries_fts, rowid, body, tenant) VALUES ('delete',
            {_SQLITE_ROWID.format(r="old")}, {_SQLITE_ENTRY_TEXT.format(p="old.payload")},
            hex(old.tenant_id));
    END""",
    f"""CREATE TRIGGER entries_fts_update
        AFTER UPDATE OF payload, kind, seq, tenant_id ON entries BEGIN
        INSERT INTO entries_fts(entries_fts, rowid, body, tenant) SELECT 'delete',
            {_SQLITE_ROWID.format(r="old")}, {_SQLITE_ENTRY_TEXT.format(p="old.payload")},
            hex(old.tenant_id)
            WHERE old.kind = 'message';
        INSERT INTO entries_fts(rowid, body, tenant) SELECT
            {_SQLITE_ROWID.format(r="new")}, {_SQLITE_ENTRY_TEXT.format(p="new.payload")},
            hex(new.tenant_id)
            WHERE new.kind = 'message';
    END""",
    f"""CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory_items BEGIN
        INSERT INTO memory_fts(rowid, body)
            VALUES (new.rowid, {_SQLITE_MEMORY_TEXT.format(p="new.payload")});
    END""",
    f"""CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory_items BEGIN
        INSERT INTO memory_fts(memory_fts, rowid, body)
            VALUES ('delete', old.rowid, {_SQLITE_MEMORY_TEXT.format(p="old.payload")});
    END""",
    f"""CREATE TRIGGER memory_fts_update AFTER UPDATE OF payload ON memory_items BEGIN
        INSERT INTO memory_fts(memory_fts, rowid, body)
            VALUES ('delete', old.rowid, {_SQLITE_MEMORY_TEXT.format(p="old.payload")});
        INSERT INTO memory_fts(rowid, body)
            VALUES (new.rowid, {_SQLITE_MEMORY_TEXT.format(p="new.payload")});
    END""",
]
_SQLITE_DOWN = [
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

_PG_UP = [
    """CREATE FUNCTION om_message_text(payload jsonb) RETURNS text
        LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
        SELECT CASE jsonb_typeof(payload -> 'message' -> 'content')
            WHEN 'string' THEN payload -> 'message' ->> 'content'
            WHEN 'array' THEN (
                SELECT string_agg(part ->> 'text', E'\\n')
                FROM jsonb_array_elements(payload -> 'message' -> 'content') AS part)
            ELSE '' END
    $$""",
    "CREATE INDEX ix_entries_search ON entries USING gin "
    "(to_tsvector('english'::regconfig, om_message_text(payload))) WHERE kind = 'message'",
    "CREATE INDEX ix_memory_items_search ON memory_items USING gin "
    "(to_tsvector('english'::regconfig, payload ->> 'text'))",
]
_PG_DOWN = [
    "DROP INDEX ix_memory_items_search",
    "DROP INDEX ix_entries_search",
    "DROP FUNCTION om_message_text(jsonb)",
]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in _SQLITE_UP if dialect == "sqlite" else _PG_UP:
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in _SQLITE_DOWN if dialect == "sqlite" else _PG_DOWN:
        op.execute(statement)
