"""How the erasure, retention and audit commands print for people (``--json`` prints the wire
models instead)."""

from __future__ import annotations

import typer

from om_api.cli.render import _print_table, _table, _when
from om_api.schemas import AuditOut, JobOut, RetentionOut


def show_erasure(job: JobOut) -> None:
    """An erasure job: what it erases, its state and what it deleted so far."""
    counts = ", ".join(f"{name} {value}" for name, value in sorted(job.counts.items()))
    what = f"{job.erases} {job.session_id}" if job.session_id else f"{job.erases}"
    typer.echo(f"erasure job {job.id} ({what}): {job.state}" + (f"; {counts}" if counts else ""))
    if job.error:
        typer.echo(f"  error: {job.error}")


def show_retention(retention: RetentionOut) -> None:
    """A tenant's retention period and the sessions a pass would erase now."""
    if retention.retention_days is None:
        typer.echo(f"tenant {retention.tenant_id} keeps its sessions (no retention period)")
        return
    typer.echo(
        f"tenant {retention.tenant_id}: sessions idle for {retention.retention_days} days are "
        f"erased (now: idle since before {_when(retention.cutoff)} UTC)"
    )
    if not retention.would_erase:
        typer.echo("no session would be erased now")
        return
    typer.echo(f"would erase {len(retention.would_erase)} sessions now:")
    for session_id in retention.would_erase:
        typer.echo(f"  {session_id}")


def show_audit(audit: AuditOut) -> None:
    """The audit trail as a table, newest first."""
    if not audit.events:
        typer.echo("no audit events")
        return
    table = _table("WHEN (UTC)", "TENANT", "KEY", "ACTION", "TARGET", "OUTCOME", "JOB")
    for event in audit.events:
        table.add_row(
            _when(event.created_at),
            event.tenant_id,
            event.key_id or "(admin)",
            event.action,
            event.target,
            event.outcome,
            event.job_id or "-",
        )
    _print_table(table)
