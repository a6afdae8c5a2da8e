"""Rebuilding the full-text index from the rows (``om search reindex``).

The index is kept by the database on every write from migration ``0012`` on; a database that
held rows before it (or an index suspected to drift) is rebuilt here. On SQLite the FTS5
tables are emptied and refilled in one write transaction, so no append can slip between the
two and be indexed twice (appends wait for it, as for any writer); on PostgreSQL the GIN
indexes are rebuilt (``REINDEX``, which blocks writes to the table meanwhile).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

from om_workers.store.engine import writer_connection
from om_workers.store.search_terms_sql import INDEX_TERMS_FUNCTION

_BATCH_SESSIONS = 200
"""Sessions indexed per statement: a progress report after each batch."""

_MESSAGE_TEXT = """
    CASE json_type(payload, '$.message.content')
        WHEN 'text' THEN json_extract(payload, '$.message.content')
        WHEN 'array' THEN (
            SELECT group_concat(json_extract(part.value, '$.text'), char(10))
            FROM json_each(payload, '$.message.content') AS part)
        ELSE '' END
"""
_FILL_ENTRIES = f"""
    INSERT INTO entries_fts(rowid, terms)
    SELECT session_pk * 4294967296 + seq, {INDEX_TERMS_FUNCTION}({_MESSAGE_TEXT}, tenant_id)
    FROM entries WHERE kind = 'message' AND session_pk > :lo AND session_pk <= :hi
"""
_FILL_MEMORY = f"""
    INSERT INTO memory_fts(rowid, terms)
    SELECT rowid, {INDEX_TERMS_FUNCTION}(json_extract(payload, '$.text'), NULL) FROM memory_items
    WHERE session_pk > :lo AND session_pk <= :hi
"""
_PG_INDEXES = ("ix_entries_search_levels", "ix_memory_items_search_levels")
_PG_COLUMN = "search_levels"
"""The levelled terms of a row on PostgreSQL (a generated column, migration ``0018``)."""
_SQLITE_TABLES = ("entries_fts", "memory_fts")


def is_search_index_object(name: str | None) -> bool:
    """Whether a database object of this name belongs to the full-text index (an FTS5 table,
    one of its shadow tables, a GIN index or the lexemes' generated column): the database
    keeps them, so the table metadata of :mod:`om_workers.store.schema` does not describe
    them."""
    if name is None:
        return False
    return name in _PG_INDEXES or name == _PG_COLUMN or name.startswith(_SQLITE_TABLES)


@dataclass(frozen=True)
class ReindexProgress:
    """How far a rebuild is: ``done`` of ``total`` steps (session batches on SQLite, indexes
    on PostgreSQL), and what the step was."""

    done: int
    total: int
    step: str


Progress = Callable[[ReindexProgress], None]


def refill_sqlite(connection: Connection, progress: Progress = lambda _: None) -> None:
    """Empty SQLite's two FTS5 tables and index every stored message and memory item again,
    a batch of sessions a statement, in the caller's transaction."""
    top = connection.execute(text("SELECT coalesce(max(pk), 0) FROM sessions")).scalar_one()
    batches = max(1, -(-int(top) // _BATCH_SESSIONS))
    connection.execute(text("INSERT INTO entries_fts(entries_fts) VALUES ('delete-all')"))
    connection.execute(text("INSERT INTO memory_fts(memory_fts) VALUES ('delete-all')"))
    for batch in range(batches):
        bounds = {"lo": batch * _BATCH_SESSIONS, "hi": (batch + 1) * _BATCH_SESSIONS}
        connection.execute(text(_FILL_ENTRIES), bounds)
        connection.execute(text(_FILL_MEMORY), bounds)
        step = f"sessions {bounds['lo'] + 1}..{min(bounds['hi'], int(top))}"
        progress(ReindexProgress(batch + 1, batches, step))


def purge_deleted_terms(engine: Engine) -> None:
    """On SQLite, merge the FTS5 index into one segment (``'optimize'``), which drops the terms
    of deleted rows: a delete only adds a marker beside the old segment, whose bytes (an erased
    message's words) stay in the file until a merge. Costs in proportion to the whole index,
    so it runs after an erasure, not after each delete. On PostgreSQL a deleted row's index
    entries go with VACUUM, as its table pages do. Raises SQLAlchemy's errors."""
    if engine.dialect.name != "sqlite":
        return
    with writer_connection(engine) as connection, connection.begin():
        for table in _SQLITE_TABLES:
            connection.execute(text(f"INSERT INTO {table}({table}) VALUES ('optimize')"))


def reindex(engine: Engine, progress: Progress = lambda _: None) -> None:
    """Rebuild the full-text index of every tenant from the stored rows, reporting each step
    to ``progress``. Raises :class:`~sqlalchemy.exc.SQLAlchemyError` subclasses as the
    database does (nothing is changed then: the rebuild is one transaction on SQLite, one
    ``REINDEX`` per index on PostgreSQL)."""
    if engine.dialect.name == "sqlite":
        with writer_connection(engine) as connection, connection.begin():
            refill_sqlite(connection, progress)
        return
    for done, name in enumerate(_PG_INDEXES, start=1):
        with engine.begin() as connection:
            connection.execute(text(f"REINDEX INDEX {name}"))
        progress(ReindexProgress(done, len(_PG_INDEXES), name))
