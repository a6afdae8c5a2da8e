"""Migrations from an empty database create the schema the store's tables describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from om_workers.store import SqlStore, current_revision, head_revision, upgrade
from om_workers.store.engine import create_store_engine
from om_workers.store.migrate import VERSION_TABLE
from om_workers.store.schema import metadata

TABLES = {"tenants", "api_keys", "sessions", "entries", "snapshots", "flush_runs", "tombstones"}


def test_upgrade_from_empty_database_creates_every_table(database_url: str) -> None:
    assert current_revision(database_url) is None
    upgrade(database_url)
    engine = create_store_engine(database_url)
    try:
        assert set(inspect(engine).get_table_names()) >= TABLES
        with engine.connect() as connection:
            # No difference between what the migrations built and what the code expects.
            diff = compare_metadata(
                MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE}),
                metadata,
            )
        assert diff == []
    finally:
        engine.dispose()
    assert current_revision(database_url) == head_revision()


def test_upgrade_is_idempotent_and_store_works_after(database_url: str) -> None:
    upgrade(database_url)
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    try:
        store.create_tenant("t")
        assert store.create_session("t", "s").entry_count == 0
    finally:
        store.close()
