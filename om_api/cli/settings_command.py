"""``om settings``: the ``OM_*`` settings this process would run with, group by group.

The groups, names and order are those of ``docs/settings.md`` (both come from
:mod:`om_workers.settings_reference`). Secrets are never printed: a set secret shows as
``********``, and a URL's password as ``***``.
"""

from __future__ import annotations

import json

import typer

from om_api.cli.common import JsonOutput, fail


def settings(as_json: JsonOutput = False) -> None:
    """Print the settings in effect: each group, its OM_* variables, their values and whether
    the environment set them or they are the defaults. Secrets are masked. See
    docs/settings.md for what each one does.

    Exit code 2 when a variable holds a value of the wrong shape (naming it).
    """
    import pydantic

    from om_workers.config import Settings
    from om_workers.settings_env import first_error
    from om_workers.settings_reference import (
        display_value,
        effective,
        from_environment,
        sections,
    )

    try:
        current = Settings()  # not the cached settings: what the environment says now
    except pydantic.ValidationError as exc:
        fail(f"invalid OM_* settings: {first_error(exc)}", 2)
    except ValueError as exc:  # OM_SETTINGS_JSON is not JSON
        fail(f"invalid OM_* settings: {exc}", 2)
    if as_json:
        typer.echo(json.dumps(effective(current), indent=2))
        return
    rows = [
        (section, leaf, display_value(leaf, current), from_environment(leaf, current))
        for section in sections()
        for leaf in section.leaves
    ]
    names = max(len(leaf.env[0]) for _, leaf, _, _ in rows) + 2
    values = min(48, max(len(_text(value)) for _, _, value, _ in rows)) + 2
    shown = None
    for section, leaf, value, given in rows:
        if section is not shown:
            if shown is not None:
                typer.echo("")
            where = f"settings.{section.key}" if section.key else "top level"
            typer.echo(f"{section.title} ({where})")
            shown = section
        source = "set" if given else "default"
        typer.echo(f"  {leaf.env[0]:<{names}}{_text(value):<{values}}{source}")


def _text(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
