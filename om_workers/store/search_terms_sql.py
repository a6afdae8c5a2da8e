"""``om_index_terms(text, tenant_id)``: the SQL function SQLite's full-text triggers call.

The terms of a row (:func:`om_core.read.search_terms.index_terms`) are computed by this
process's Python, inside the statement that writes the row, so the index is written in the
writer's transaction as before; every connection of the store registers the function when it
opens (:mod:`om_workers.store.engine`). A connection without it (the ``sqlite3`` shell) cannot
write entries or memory items: its insert fails with "no such function", and nothing is
written.
"""

from __future__ import annotations

import sqlite3

from om_core.read.search_terms import index_terms, tenant_term

INDEX_TERMS_FUNCTION = "om_index_terms"


def _index_terms(text: object, tenant_id: object) -> str:
    terms = index_terms(text if isinstance(text, str) else "")
    if isinstance(tenant_id, str):
        return f"{terms} {tenant_term(tenant_id)}"
    return terms


def register(connection: sqlite3.Connection) -> None:
    """Make ``om_index_terms`` callable on ``connection`` (a DB-API SQLite connection)."""
    connection.create_function(INDEX_TERMS_FUNCTION, 2, _index_terms, deterministic=True)
