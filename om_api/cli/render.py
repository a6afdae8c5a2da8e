"""How the client commands show the API's answers to people: plain text with real line breaks
for rendered memory, and rich tables for lists. Scripts use ``--json`` instead, which prints
the wire model itself (:func:`om_api.cli.common.print_json`).

Memory text is printed verbatim: it holds ``[om:...]`` references that rich would read as
markup, so the console here never interprets markup.
"""

from __future__ import annotations

import json
from datetime import datetime

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from om_api.schemas import (
    ApiKeyOut,
    ContextOut,
    EntryOut,
    FlushQueueOut,
    FlushTicket,
    JobOut,
    RateLimitsOut,
    RecallOut,
    SessionOut,
    SessionsPage,
    StatusOut,
    ViewOut,
)
from om_core.ledger.funnel import ORIGIN_KEY

_SNIPPET_CHARS = 240
"""A source message longer than this is cut (``recall --json`` has all of it)."""


def _console() -> Console:
    # Built per call: its width follows the terminal (or COLUMNS) of this moment.
    return Console(markup=False, highlight=False, emoji=False)


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def _print_table(table: Table) -> None:
    # Rendered, then printed line by line without the padding rich leaves at line ends, so
    # the output pastes cleanly.
    console = _console()
    with console.capture() as captured:
        console.print(table)
    for line in captured.get().splitlines():
        typer.echo(line.rstrip())


def _table(*columns: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def entry_text(entry: EntryOut) -> str:
    """One line of what an entry says: its message text (text parts joined), its tool calls
    as ``name(arguments)``, or for other kinds the kind and summary; cut to a readable size."""
    parts: list[str] = []
    message = entry.message
    if message is not None:
        if isinstance(message.content, str):
            parts.append(message.content)
        else:
            parts.extend(part.text or f"<{part.type}>" for part in message.content)
        for call in message.tool_calls:
            parts.append(f"{call.name}({json.dumps(call.arguments, ensure_ascii=False)})")
    else:
        parts.append(entry.summary or f"<{entry.kind}>")
    text = " ".join(" ".join(parts).split())
    return text if len(text) <= _SNIPPET_CHARS else f"{text[: _SNIPPET_CHARS - 3]}..."


def _role(entry: EntryOut) -> str:
    if entry.message is None:
        return entry.kind
    if entry.message.role == "tool" and entry.message.tool_name:
        return f"tool {entry.message.tool_name}"
    return entry.message.role


def _origin(entry: EntryOut) -> str:
    """``session/entry`` of a funneled copy's origin, ``""`` for any other entry."""
    origin = (entry.data or {}).get(ORIGIN_KEY)
    if not isinstance(origin, dict):
        return ""
    return f"{origin.get('sessionId', '?')}/{origin.get('entryId', '?')}"


def show_recall(result: RecallOut) -> None:
    """A recalled item: what it is and says, then the messages it rests on, in a table."""
    if not result.found:
        typer.echo(f"{result.id}: not found ({result.reason or 'unknown'})")
        return
    state = " (dropped from the active pool)" if result.dropped else ""
    typer.echo(f"{result.kind} {result.id}{state}")
    typer.echo(f"  {result.text or ''}")
    if result.supporting_observations:
        typer.echo("")
        typer.echo(f"supporting observations ({len(result.supporting_observations)}):")
        table = _table("OBSERVATION", "TEXT")
        for observation in result.supporting_observations:
            table.add_row(observation.id, observation.text)
        _print_table(table)
    typer.echo("")
    count = len(result.sources)
    typer.echo(f"sources ({count} {'entry' if count == 1 else 'entries'}):")
    origins = [_origin(entry) for entry in result.sources]
    if any(origins):
        # Copies funneled from child sessions: say where each came from.
        sources = _table("ENTRY", "ROLE", "FROM", "TEXT")
        for entry, origin in zip(result.sources, origins, strict=True):
            sources.add_row(entry.id, _role(entry), origin, entry_text(entry))
    else:
        sources = _table("ENTRY", "ROLE", "TEXT")
        for entry in result.sources:
            sources.add_row(entry.id, _role(entry), entry_text(entry))
    _print_table(sources)
    for label, ids in (
        ("missing sources", result.missing_source_entry_ids),
        ("dropped supporting observations", result.dropped_supporting_observation_ids),
        ("missing supporting observations", result.missing_supporting_observation_ids),
    ):
        if ids:
            typer.echo(f"{label}: {', '.join(ids)}")


def show_sessions(page: SessionsPage) -> None:
    """The sessions as a table (times in UTC), and how to get the next page (on stderr)."""
    if not page.sessions:
        typer.echo("no sessions")
        return
    table = _table("SESSION", "ENTRIES", "UNOBSERVED TOKENS", "CREATED (UTC)", "UPDATED (UTC)")
    for session in page.sessions:
        table.add_row(
            session.id,
            str(session.entry_count),
            str(session.unobserved_tokens),
            _when(session.created_at),
            _when(session.updated_at),
        )
    _print_table(table)
    if page.next_cursor:
        typer.echo(f"more: om sessions --cursor {page.next_cursor}", err=True)


def show_keys(tenant_id: str, keys: list[ApiKeyOut]) -> None:
    """A tenant's keys as a table: id, prefix, label, created, revoked (never the key)."""
    if not keys:
        typer.echo(f"tenant {tenant_id} has no API keys")
        return
    table = _table("KEY ID", "PREFIX", "LABEL", "CREATED (UTC)", "REVOKED (UTC)")
    for key in keys:
        table.add_row(
            key.key_id, key.prefix, key.label, _when(key.created_at), _when(key.revoked_at)
        )
    _print_table(table)


def show_limits(limits: RateLimitsOut) -> None:
    """A tenant's per-key rate limits as a table: class, rate, burst, override or default."""
    table = _table("CLASS", "PER SECOND", "BURST", "SOURCE")
    for name, limit in limits.effective.items():
        source = "override" if name in limits.overrides else "default"
        table.add_row(name, f"{limit.rate_per_s:g}", str(limit.burst), source)
    typer.echo(f"rate limits per API key of tenant {limits.tenant_id}")
    _print_table(table)


def show_queue(queue: FlushQueueOut) -> None:
    """The fair queue: the backlog, then a table of tenants, busiest first."""
    typer.echo(f"{queue.backlog} flush jobs in the fair queue (waiting, queued or running)")
    if not queue.tenants:
        return
    table = _table("TENANT", "WAITING", "QUEUED", "RUNNING", "THROTTLED")
    for t in queue.tenants:
        table.add_row(t.tenant_id, str(t.waiting), str(t.queued), str(t.running), str(t.throttled))
    _print_table(table)


def show_key(key: ApiKeyOut) -> None:
    """One key's state after a revocation."""
    typer.echo(f"key {key.key_id} ({key.prefix}...) of tenant {key.tenant_id}")
    typer.echo(f"revoked at {_when(key.revoked_at)} UTC" if key.revoked else "active")


def show_link(session: SessionOut) -> None:
    """A session just linked to its workspace."""
    typer.echo(f"{session.id} -> {session.workspace}: new messages are copied")


def show_unlinked(session: SessionOut) -> None:
    """A session just unlinked."""
    typer.echo(f"{session.id}: not linked")


def show_ticket(ticket: FlushTicket) -> None:
    """A flush request's job, not waited for."""
    typer.echo(f"job {ticket.job_id} {'coalesced' if ticket.coalesced else 'queued'}")


def show_job(job: JobOut) -> None:
    """A finished (or still pending) flush job: state, what it recorded, and why not."""
    counts = ", ".join(f"{k} {v}" for k, v in job.counts.items()) or "nothing recorded"
    typer.echo(f"job {job.id} {job.state}: {counts}")
    for line in (job.reason, job.error):
        if line:
            typer.echo(f"  {line}")
    usage = job.usage
    if usage is not None and usage.calls:
        cost = "" if usage.cost is None else f", cost {usage.cost:.6f}"
        typer.echo(
            f"  model usage: {usage.calls} calls, {usage.input_tokens} input and "
            f"{usage.output_tokens} output tokens{cost}"
        )


def show_context(result: ContextOut) -> None:
    """The two context blocks as the next turn gets them, and what memory does not cover yet
    (on stderr, so the blocks can be piped alone)."""
    memory, recent = result.blocks
    unobserved = result.unobserved
    typer.echo(memory.text or "(no memory yet)")
    typer.echo("")
    typer.echo(recent.text or "(no messages)")
    typer.echo(
        f"\n{unobserved.messages} messages ({unobserved.tokens} tokens) not in memory yet; "
        f"budget {result.max_tokens} tokens",
        err=True,
    )


def show_status(status: StatusOut) -> None:
    """om:status as the service renders it."""
    typer.echo(status.text)


def show_view(view: ViewOut) -> None:
    """om:view as the service renders it."""
    typer.echo(view.text or "(no memory yet)")
