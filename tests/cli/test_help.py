"""Every command's --help, as people read it: plain text (no RST markup from docstrings), flags
shown as flags (``--full``, never ``--full <bool>``), and argument names in usage upper case
and spelled the same wherever the same argument appears."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import typer
from typer.testing import CliRunner

from om_api.cli import app
from tests.cli.test_commands import om

FORBIDDEN = ("``", ":class:", ":func:", ":mod:", ":meth:", ":data:", "<bool>")
USAGE_WORDS = {"[OPTIONS]", "COMMAND", "[ARGS]..."}


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    # Duck-typed: typer builds its own click classes (groups have ``commands``).
    found = [path]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        found += _commands(sub, (*path, name))
    return found


def _usage_arguments(text: str, path: tuple[str, ...]) -> list[str]:
    usage = next(line for line in text.splitlines() if line.startswith("Usage:"))
    words = usage.split()[2 + len(path) :]  # after "Usage: om <path>"
    return [w.strip("{}[].") for w in words if w not in USAGE_WORDS]


def test_every_help_is_plain_text_with_flags_and_upper_case_arguments() -> None:
    top = om("--help")
    assert top.returncode == 0, top.stderr
    assert not [bad for bad in FORBIDDEN if bad in top.stdout], top.stdout
    runner = CliRunner()
    paths = _commands(typer.main.get_command(app))
    assert ("keys", "list") in paths and ("sessions",) in paths and ("recall",) in paths
    metavars: dict[str, set[str]] = {}
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
        assert result.exit_code == 0, (path, result.output)
        text = result.output
        assert not [bad for bad in FORBIDDEN if bad in text], (path, text)
        for argument in _usage_arguments(text, path):
            assert re.fullmatch(r"[A-Z][A-Z_]*", argument), (path, argument)
        command: Any = typer.main.get_command(app)
        for name in path:
            command = command.commands[name]
        for param in command.params:
            if param.param_type_name == "argument":
                metavars.setdefault(param.name or "", set()).add(param.metavar or "")
            elif getattr(param, "is_flag", False) and not getattr(param, "count", False):
                # A boolean option is a flag: no value after it.
                assert param.opts[0].startswith("--"), (path, param.opts)
    # One spelling per argument: SESSION is SESSION in every command that takes it.
    assert all(len(spellings) == 1 for spellings in metavars.values()), metavars
    assert metavars["session"] == {"SESSION"} and metavars["memory_id"] == {"MEMORY_ID"}
    assert metavars["tenant"] == {"TENANT"} and metavars["key_id"] == {"KEY_ID"}


def test_boolean_options_take_no_value() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["view", "--help"], env={"COLUMNS": "100"})
    assert re.search(r"^\s+--full\s+All active memory", result.output, re.MULTILINE), result.output
    assert re.search(r"^\s+--json\s+Print the API", result.output, re.MULTILINE), result.output


SERVER_LIBRARIES = ("alembic", "celery", "fastapi", "mcp", "redis", "sqlalchemy", "uvicorn")


def test_the_command_line_loads_no_server_library_until_a_command_needs_it() -> None:
    """Every ``om`` call (``--help``, a client command) pays for what the command line loads
    before it runs anything; the web framework, the database and Redis libraries, Celery and
    the migrations come with the commands that use them."""
    probe = (
        "import sys, om_api.cli.commands; "
        f"print(' '.join(m for m in {SERVER_LIBRARIES!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert loaded == []
