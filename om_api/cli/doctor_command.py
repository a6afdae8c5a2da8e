"""``om doctor``: one line per check of the deployment this environment points at, the fix
of each failure, exit 1 when any check failed (:mod:`om_workers.doctor`)."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer

from om_api.cli.common import JsonOutput

MARKS = {"ok": "ok  ", "fail": "FAIL", "skip": "skip"}


def doctor(as_json: JsonOutput = False) -> None:
    """Check the configuration, the database (reachable, migrated), Redis, the broker, the
    live workers and their slots, beat, the provider and its key, and clock skew; one line
    each, with the fix of each failure. Exit 1 when any check failed. Reads the OM_* variables
    the service's processes read; never prints a secret."""
    # Imported here: the checks bring the database, Redis and migration libraries.
    from om_workers.doctor import diagnose, failed

    checks = diagnose()
    if as_json:
        typer.echo(json.dumps({"ok": not failed(checks), "checks": [asdict(c) for c in checks]}))
    else:
        for check in checks:
            line = f"{MARKS[check.status]} {check.name}: {check.detail}"
            typer.echo(line + (f" -> fix: {check.fix}" if check.fix else ""))
    if failed(checks):
        raise typer.Exit(1)
