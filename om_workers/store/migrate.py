"""Schema migrations as a Python entry point (``om db upgrade`` will call :func:`upgrade`).

The Alembic environment and revisions live inside the package, so an installed wheel can
migrate a database with no ``alembic.ini`` and no source checkout.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from om_workers.errors import MigrationError, StoreUnavailableError
from om_workers.store.engine import create_store_engine, normalize_database_url

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "om_schema_version"


def alembic_config(database_url: str) -> Config:
    """An Alembic config for the packaged migrations and ``database_url`` (no ini file)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["database_url"] = normalize_database_url(database_url)
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Migrate the database at ``database_url`` to ``revision`` (the latest by default).

    Safe to run on an empty database and again on an up-to-date one. Raises
    :class:`~om_workers.errors.ConfigError` for an unusable URL,
    :class:`StoreUnavailableError` when the database cannot be reached, and
    :class:`MigrationError` when a migration fails (its transaction is rolled back).
    """
    config = alembic_config(database_url)
    try:
        command.upgrade(config, revision)
    except SQLAlchemyError as exc:
        if isinstance(exc, OperationalError):
            raise StoreUnavailableError(f"cannot migrate: {exc.__class__.__name__}") from exc
        raise MigrationError(f"migration to {revision!r} failed: {exc}") from exc


def head_revision() -> str:
    """The newest revision the package ships."""
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    if head is None:
        raise MigrationError("the package ships no migrations")
    return head


def current_revision(database_url: str) -> str | None:
    """The revision the database is at, or ``None`` for an unmigrated database.

    Raises :class:`StoreUnavailableError` when the database cannot be reached.
    """
    engine = create_store_engine(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
            return context.get_current_revision()
    except SQLAlchemyError as exc:
        raise StoreUnavailableError(f"cannot read the schema revision: {exc}") from exc
    finally:
        engine.dispose()
