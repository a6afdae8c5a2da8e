"""``om search``: rebuild the full-text index (``reindex``, on the database directly).

``reindex`` uses --database-url, else OM_DATABASE_URL, like ``om db upgrade``; run it once
after upgrading a database that already held sessions (the index is kept on every write from
then on).
"""

from __future__ import annotations

import typer

from om_api.cli.common import DatabaseUrl, fail
from om_workers.config import get_settings

search_app = typer.Typer(help="Full-text search of messages and memory.", no_args_is_help=True)


@search_app.command("reindex")
def reindex(database_url: DatabaseUrl = None) -> None:
    """Rebuild the full-text index from the stored messages and memory, printing progress.

    On SQLite writers wait while it runs (one transaction); on PostgreSQL each index is
    rebuilt in turn."""
    from sqlalchemy.exc import SQLAlchemyError

    from om_workers.errors import OMWorkersError
    from om_workers.store.engine import create_store_engine
    from om_workers.store.search_index import ReindexProgress
    from om_workers.store.search_index import reindex as rebuild

    def report(step: ReindexProgress) -> None:
        typer.echo(f"[{step.done}/{step.total}] {step.step}", err=True)

    try:
        engine = create_store_engine(database_url or get_settings().store.url)
    except OMWorkersError as exc:
        fail(str(exc), 2)
    try:
        rebuild(engine, report)
    except SQLAlchemyError as exc:
        fail(f"reindex failed, nothing changed: {type(exc).__name__}")
    finally:
        engine.dispose()
    typer.echo("search index rebuilt")
