"""``om search``: search a running API (``query``), rebuild the full-text index
(``reindex``) and fill in the vectors of the semantic search (``embed``), both on the
database directly.

``query`` talks to ``--api``/``--key`` (else OM_API_URL, OM_API_KEY) like the other client
commands. ``reindex`` uses --database-url, else OM_DATABASE_URL, like ``om db upgrade``; run it once
after upgrading a database that already held sessions (the index is kept on every write from
then on).
"""

from __future__ import annotations

from typing import Annotated

import typer

from om_api.cli.common import ApiKey, ApiUrl, DatabaseUrl, JsonOutput, api_client, fail, show
from om_api.schemas import SearchPage
from om_core.errors import InvalidSearchQueryError
from om_core.read.search_narrowing import parse_narrowing
from om_workers.config import get_settings

search_app = typer.Typer(help="Full-text search of messages and memory.", no_args_is_help=True)


def show_hits(page: SearchPage) -> None:
    """Each hit as ``score kind session/id`` then its snippet; the next cursor on stderr."""
    if not page.hits:
        typer.echo("no hits")
    for hit in page.hits:
        typer.echo(f"{hit.score:.4g}  {hit.kind:<11} {hit.session_id}/{hit.id}")
        typer.echo(f"    {hit.snippet}")
        if hit.source_ids:
            typer.echo(f"    rests on: {', '.join(hit.source_ids)}")
    if page.next_cursor:
        typer.echo(f"more: --cursor {page.next_cursor}", err=True)


@search_app.command("query")
def query(
    text: Annotated[str, typer.Argument(metavar="TEXT", help="Words to search for.")],
    session: Annotated[
        str | None, typer.Option("--session", help="Search this session only.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="Hits per page (1-100).")] = 10,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Continue after an earlier page.")
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option("--mode", help="lexical (default) or hybrid."),
    ] = None,
    metadata: Annotated[
        list[str] | None,
        typer.Option(
            "--metadata",
            metavar="KEY:VALUE",
            help="Only sessions whose metadata holds KEY with this string value (repeatable).",
        ),
    ] = None,
    as_json: JsonOutput = False,
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """Search the messages and memory of the key's tenant (or one session), best first. Any
    word matches; recall a memory hit by id (om recall) for its exact sources."""
    try:
        narrowing = parse_narrowing(metadata)
    except InvalidSearchQueryError as exc:
        fail(f"--metadata takes KEY:VALUE: {exc}", 2)
    pairs = dict(narrowing.pairs) if narrowing is not None else None
    with api_client(api_url, key) as client:
        page = client.search(
            text, session_id=session, limit=limit, cursor=cursor, mode=mode, metadata=pairs
        )
    show(page, as_json, show_hits)


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


@search_app.command("embed")
def embed(
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Embed this tenant's sessions only.")
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Give every session's messages and memory the vectors they lack (semantic search),
    printing progress per session; safe to rerun (what has a vector is skipped).

    Uses OM_EMBEDDINGS_* like the workers; exits 2 when embeddings are off."""
    from om_core.errors import ObservationalMemoryError
    from om_workers.embeddings.setup import build_embedder, embedding_secrets
    from om_workers.providers.setup import provider_secrets
    from om_workers.store.store import SqlStore
    from om_workers.store.vectors import vector_backend

    settings = get_settings()
    embedder = build_embedder(settings)
    if embedder is None:
        fail("embeddings are off: set OM_EMBEDDINGS_PROVIDER to local or openai", 2)
    try:
        store = SqlStore.from_url(database_url or settings.store.url)
    except ObservationalMemoryError as exc:
        fail(str(exc), 2)
    try:
        typer.echo(vector_backend(store.engine), err=True)
        targets = store.vectors.sessions(tenant)
        written = 0
        for done, (tenant_id, session_id) in enumerate(targets, start=1):
            written += store.vectors.embed_session(
                tenant_id,
                session_id,
                embedder,
                batch_size=settings.embeddings.batch_size,
                secrets=provider_secrets(settings) + embedding_secrets(settings),
            )
            typer.echo(f"[{done}/{len(targets)}] {session_id}: {written} vectors", err=True)
    except ObservationalMemoryError as exc:
        fail(f"embedding stopped (what was written stays): {exc}")
    finally:
        store.close()
    typer.echo(f"{written} vectors written")
