"""Alembic environment: runs on a connection handed in by ``om_workers.store.migrate``, or on
an engine built from ``config.attributes["database_url"]``, with the store's own engine setup.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from om_workers.store.engine import create_store_engine
from om_workers.store.schema import metadata

VERSION_TABLE = "om_schema_version"


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        # SQLite cannot ALTER most things in place; batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_offline() -> None:
    context.configure(
        url=context.config.attributes["database_url"],
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_online() -> None:
    given = context.config.attributes.get("connection")
    if isinstance(given, Connection):
        _run(given)
        return
    engine = create_store_engine(context.config.attributes["database_url"])
    try:
        with engine.connect() as connection:
            _run(connection)
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    _run_offline()
else:
    _run_online()
