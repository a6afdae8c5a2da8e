"""Schema migrations as a Python entry point (``om db upgrade`` calls
:func:`upgrade_when_reachable`, which waits for a database that is still starting).

The Alembic environment and revisions live inside the package, so an installed wheel can
migrate a database with no ``alembic.ini`` and no source checkout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
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


RETRY_FIRST_S = 0.5
"""Pause after the first failed attempt of :func:`upgrade_when_reachable`; it doubles."""
RETRY_CAP_S = 5.0
"""Longest pause between two attempts of :func:`upgrade_when_reachable`."""


def upgrade_when_reachable(
    database_url: str,
    wait_s: float,
    *,
    on_retry: Callable[[StoreUnavailableError, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """:func:`upgrade`, tried again while the database cannot be reached, for at most
    ``wait_s`` seconds after the first attempt (``0``: one attempt).

    A migration job usually starts beside its database and must not fail because the server
    is still starting. The pause between attempts starts at :data:`RETRY_FIRST_S` and doubles
    up to :data:`RETRY_CAP_S`; ``on_retry(error, pause_s)`` is told before each one. One
    attempt lasts as long as connecting does (libpq's ``connect_timeout``, when the URL sets
    it). Raises the last :class:`StoreUnavailableError` once the time is up, and at once
    whatever else :func:`upgrade` raises (:class:`MigrationError`, ``ConfigError``).
    """
    deadline = clock() + max(0.0, wait_s)
    pause = RETRY_FIRST_S
    while True:
        try:
            upgrade(database_url)
            return
        except StoreUnavailableError as exc:
            left = deadline - clock()
            if left <= 0:
                raise
            wait = min(pause, left)
            if on_retry is not None:
                on_retry(exc, wait)
            sleep(wait)
            pause = min(pause * 2, RETRY_CAP_S)


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
