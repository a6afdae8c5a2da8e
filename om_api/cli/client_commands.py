"""The commands that talk to a running API: om sessions, link, unlink, flush, context, status,
view, recall.

Each prints for people by default (rendered text, tables: :mod:`om_api.cli.render`) and, with
``--json``, the API's answer exactly as the wire model serializes it. The target is ``--api``
and ``--key``, else OM_API_URL and OM_API_KEY. Their docstrings are their ``--help``: plain
text. :mod:`om_api.cli.commands` registers them on the ``om`` app.
"""

from __future__ import annotations

from typing import Annotated

import typer

from om_api.cli import render
from om_api.cli.common import ApiKey, ApiUrl, JsonOutput, SessionArg, api_client, show


def sessions(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", help="Sessions per page (1-100).")] = 20,
    cursor: Annotated[
        str | None,
        typer.Option("--cursor", help="Continue after an earlier page (its next cursor)."),
    ] = None,
    updated_since: Annotated[
        str | None,
        typer.Option(
            "--updated-since",
            help="Only sessions updated at or after this ISO-8601 time, e.g. 2026-05-01 or "
            "2026-05-01T12:00:00+02:00 (no offset: UTC).",
        ),
    ] = None,
    as_json: JsonOutput = False,
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """List the sessions of the key's tenant, newest first, one page at a time (without a
    command), or erase, export or import one (om sessions erase, export, import)."""
    if ctx.invoked_subcommand is not None:
        return
    with api_client(api_url, key) as client:
        page = client.list_sessions(limit=limit, cursor=cursor, updated_since=updated_since)
    show(page, as_json, render.show_sessions)


def link(
    session: SessionArg,
    workspace: Annotated[
        str, typer.Argument(metavar="WORKSPACE", help="Workspace session id (same tenant).")
    ],
    as_json: JsonOutput = False,
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """Link a session to a workspace session: every user, assistant and tool message appended
    to SESSION from now on is also appended to WORKSPACE (a new id, naming its origin), so the
    workspace's memory observes the session's work. Memory records are never copied."""
    with api_client(api_url, key) as client:
        result = client.link(session, workspace)
    show(result, as_json, render.show_link)


def unlink(
    session: SessionArg, as_json: JsonOutput = False, api_url: ApiUrl = None, key: ApiKey = None
) -> None:
    """Stop copying a session's messages onto its workspace; copies already made stay."""
    with api_client(api_url, key) as client:
        result = client.unlink(session)
    show(result, as_json, render.show_unlinked)


def flush(
    session: SessionArg,
    force: Annotated[
        bool, typer.Option("--force", help="Observe now, below the token threshold too.")
    ] = False,
    wait: Annotated[
        float, typer.Option("--wait", help="Seconds to wait for the job to finish (0: don't).")
    ] = 60.0,
    as_json: JsonOutput = False,
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """Request a flush of a session and say what it did."""
    with api_client(api_url, key) as client:
        accepted = client.flush(session, force=force)
        if wait <= 0:
            show(accepted, as_json, render.show_ticket)
            return
        job = client.wait_for_job(accepted.job_id, timeout_s=wait)
    show(job, as_json, render.show_job)


def context(
    session: SessionArg,
    max_tokens: Annotated[
        int | None,
        typer.Option("--max-tokens", help="Token budget (default: the server's)."),
    ] = None,
    as_json: JsonOutput = False,
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """The context the next turn gets: memory, then the recent messages."""
    with api_client(api_url, key) as client:
        result = client.context(session, max_tokens=max_tokens)
    show(result, as_json, render.show_context)


def status(
    session: SessionArg, as_json: JsonOutput = False, api_url: ApiUrl = None, key: ApiKey = None
) -> None:
    """Memory status of a session (om:status): recorded, dropped, active and visible memory."""
    with api_client(api_url, key) as client:
        result = client.status(session)
    show(result, as_json, render.show_status)


def view(
    session: SessionArg,
    full: Annotated[
        bool, typer.Option("--full", help="All active memory, not just what context shows.")
    ] = False,
    as_json: JsonOutput = False,
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """Render a session's observational memory (om:view)."""
    with api_client(api_url, key) as client:
        result = client.view(session, full=full)
    show(result, as_json, render.show_view)


def recall(
    session: SessionArg,
    memory_id: Annotated[
        str,
        typer.Argument(
            metavar="MEMORY_ID", help="Observation or reflection id (om:... also accepted)."
        ),
    ],
    as_json: JsonOutput = False,
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """Recall one memory item: its text and the source messages it rests on."""
    with api_client(api_url, key) as client:
        result = client.recall(session, memory_id)
    show(result, as_json, render.show_recall)
