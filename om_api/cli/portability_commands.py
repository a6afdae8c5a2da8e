"""``om sessions export`` / ``om sessions import`` and ``om tenants export``: a session (or a
whole tenant) to a JSON-lines file and back, through a running API.

An export is streamed to the file as it arrives (constant memory, whatever the session's
length), with its progress on stderr; an import sends the file in one request, which the API
stores all or nothing. ``--json`` prints the outcome as JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Annotated

import typer

from om_api.cli.common import (
    ApiKey,
    ApiUrl,
    JsonOutput,
    SessionArg,
    TenantArg,
    api_client,
    fail,
    print_json,
)
from om_api.client.core import BinarySink
from om_workers.config import get_settings

OutputFile = Annotated[
    Path | None,
    typer.Option("-o", "--output", help="Write to this file (default: standard output)."),
]
PROGRESS_EVERY = 1024 * 1024
"""Bytes between two progress lines on stderr."""


class _Progress:
    """A file that counts what goes through it and says so on stderr every
    :data:`PROGRESS_EVERY` bytes (only when the export goes to a file)."""

    def __init__(self, out: IO[bytes], label: str, loud: bool) -> None:
        self._out = out
        self._label = label
        self._loud = loud
        self.written = 0
        self.lines = 0
        self._next = PROGRESS_EVERY

    def write(self, chunk: bytes) -> int:
        self._out.write(chunk)
        self.written += len(chunk)
        self.lines += chunk.count(b"\n")
        if self._loud and self.written >= self._next:
            self._next += PROGRESS_EVERY
            typer.echo(f"{self._label}: {self.lines} lines, {self.written} bytes", err=True)
        return len(chunk)


def _export_to(
    output: Path | None, label: str, as_json: bool, write: Callable[[BinarySink], int]
) -> None:
    """Run ``write(progress)`` into ``output`` (or stdout) and report what it wrote."""
    if output is None:
        progress = _Progress(sys.stdout.buffer, label, loud=False)
        write(progress)
        sys.stdout.buffer.flush()
        return
    with output.open("wb") as file:
        progress = _Progress(file, label, loud=not as_json)
        write(progress)
    summary = {"file": str(output), "lines": progress.lines, "bytes": progress.written}
    if as_json:
        typer.echo(json.dumps(summary))
    else:
        typer.echo(f"{label}: {progress.lines} lines, {progress.written} bytes -> {output}")


def sessions_export(
    session: SessionArg,
    output: OutputFile = None,
    as_json: JsonOutput = False,
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """Export a session as JSON lines: a header, its current branch root to leaf (one entry a
    line, in the ledger's wire format), the service's records (tombstones, memory items,
    link) and an end line. Streamed to the file as it arrives."""
    with api_client(api_url, key) as client:
        _export_to(
            output,
            f"export {session}",
            as_json,
            lambda out: client.export_session(session, out),
        )


def sessions_import(
    session: SessionArg,
    file: Annotated[
        Path,
        typer.Argument(metavar="FILE", help="An export (om sessions export)."),
    ],
    as_json: JsonOutput = False,
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """Import an export into SESSION (created when the tenant has none), all or nothing: a bad
    line is refused with its number and nothing is stored. Importing the same file again
    stores nothing twice. Entry ids are kept, so the file goes to another tenant or
    deployment, not to a second session of the same tenant (refused: the ids clash)."""
    try:
        content = file.read_bytes()
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror or exc}", 2)
    if not as_json:
        lines = content.count(b"\n")
        typer.echo(f"import {session}: sending {lines} lines, {len(content)} bytes", err=True)
    with api_client(api_url, key) as client:
        result = client.import_session(session, content)
    if as_json:
        print_json(result)
        return
    verb = "created" if result.created else "already there"
    typer.echo(
        f"import {session}: {verb}; {result.imported} entries imported, {result.duplicates} "
        f"already stored, {result.tombstones} tombstones; {result.session.entry_count} entries"
    )


def tenants_export(
    tenant: TenantArg,
    output: OutputFile = None,
    as_json: JsonOutput = False,
    api_url: ApiUrl = None,
    admin_token: Annotated[
        str | None,
        typer.Option("--admin-token", help="The API's admin token (else OM_ADMIN_TOKEN)."),
    ] = None,
) -> None:
    """Export every session of a tenant through the API's admin route: one session's export
    after another, each importable with om sessions import."""
    from om_api.client import OMClient, OMClientError

    settings = get_settings()
    token = admin_token or settings.api.admin_token
    if not token:
        fail("om tenants export needs the admin token: --admin-token or OM_ADMIN_TOKEN", 2)
    try:
        with OMClient(api_url or settings.cli.api_url, admin_token=token) as client:
            _export_to(
                output,
                f"export tenant {tenant}",
                as_json,
                lambda out: client.export_tenant(tenant, out),
            )
    except OMClientError as exc:
        fail(str(exc))
