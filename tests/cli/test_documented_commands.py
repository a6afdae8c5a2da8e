"""Every ``om ...`` command line the README and the docs show parses: taken from fenced code
blocks and inline code, each is parsed in-process by the command it names, as a dry run (its
arguments and options are checked, nothing runs), and its --help answers through the app.

A bare command name in prose (`om tenants limits`) names a command: it must exist. Placeholders
in upper case (SESSION, TENANT ...) stand for any text; those that stand for numbers are
listed in PLACEHOLDERS."""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
import typer
from typer.testing import CliRunner

from om_api.cli import app

ROOT: Final = Path(__file__).resolve().parents[2]
DOCS: Final = (
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "deploy" / "README.md",
)
PLACEHOLDERS: Final = {"N": "1000"}
"""Upper-case words the docs use where a number goes."""

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE = re.compile(r"`([^`]+)`")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Documented:
    """One command line as a doc shows it."""

    where: str
    words: tuple[str, ...]
    """After ``om``: ``("keys", "create", "--tenant", "acme")``."""


@functools.cache
def _root() -> Any:
    # Duck-typed: typer builds its own click classes (a group has ``commands``). Built once:
    # every fenced line of every doc asks for it, and building it is most of the collection.
    return typer.main.get_command(app)


def _commands(command: Any) -> dict[str, Any]:
    return dict(getattr(command, "commands", {}))


def _from_fenced_line(line: str, where: str) -> Documented | None:
    """``om queue``, ``$ om queue``, ``OM_REDIS_URL=... om queue`` or ``... run --rm api om
    keys ...``: ``om`` as a command word followed by one of its commands."""
    try:
        words = shlex.split(line.removeprefix("$ ").strip(), comments=True)
    except ValueError:
        return None
    while words and _ASSIGNMENT.match(words[0]):
        words.pop(0)
    commands = _commands(_root())
    for index, word in enumerate(words):
        following = words[index + 1] if index + 1 < len(words) else None
        if word == "om" and (index == 0 or following in commands):
            return Documented(where, tuple(words[index + 1 :]))
    return None


def documented(path: Path) -> list[Documented]:
    """Every ``om`` command line of one Markdown file, fenced and inline."""
    name = str(path.relative_to(ROOT))
    found: list[Documented] = []
    prose: list[str] = []
    fenced, pending = False, ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            fenced, pending = not fenced, ""
            prose.append("")
            continue
        if not fenced:
            prose.append(line)
            continue
        prose.append("")
        if line.rstrip().endswith("\\"):  # a continued shell line
            pending += line.rstrip()[:-1] + " "
            continue
        command = _from_fenced_line(pending + line, f"{name}:{number}")
        pending = ""
        if command is not None:
            found.append(command)
    text = "\n".join(prose)
    for match in _INLINE.finditer(text):
        code = " ".join(match.group(1).split()).removeprefix("$ ")
        if code.startswith("om "):
            number = text.count("\n", 0, match.start()) + 1
            found.append(Documented(f"{name}:{number}", tuple(shlex.split(code)[1:])))
    return found


def _all_documented() -> list[Documented]:
    return [command for path in DOCS for command in documented(path)]


def _resolve(words: tuple[str, ...]) -> tuple[tuple[str, ...], Any, list[str]]:
    """The command path (``("keys", "create")``), its command and the words after it."""
    command = _root()
    path: list[str] = []
    rest = list(words)
    while rest and rest[0] in _commands(command):
        path.append(rest.pop(0))
        command = _commands(command)[path[-1]]
    return tuple(path), command, rest


def _dry_run(command: Any, path: tuple[str, ...], rest: list[str]) -> None:
    """Parse ``rest`` as ``om <path>`` would, invoking nothing; raises click's UsageError (a
    ``typer.TyperException``)."""
    args = [PLACEHOLDERS.get(word, word) for word in rest]
    with command.make_context(" ".join(("om", *path)), args):
        pass


def test_the_docs_show_commands_to_check() -> None:
    # The parser finds what is there: a fenced line, an inline one, one inside compose.
    found = {c.words for c in _all_documented()}
    assert ("keys", "create", "--tenant", "acme") in found
    assert ("queue",) in found and ("db", "upgrade") in found
    assert len(found) > 30


@functools.cache
def _help_answers(path: tuple[str, ...]) -> bool:
    """``om <path> --help`` exits 0 through the app (once per command: the docs repeat)."""
    return CliRunner().invoke(app, [*path, "--help"]).exit_code == 0


def _id(command: Documented) -> str:
    return f"{command.where} om {' '.join(command.words)}"


@pytest.mark.parametrize("command", _all_documented(), ids=_id)
def test_every_documented_command_parses(command: Documented) -> None:
    path, resolved, rest = _resolve(command.words)
    assert path and not (_commands(resolved) and rest), f"{_id(command)}: no such command"
    assert _help_answers(path), f"{_id(command)}: --help fails"
    if rest:  # a command line, not only a command's name
        try:
            _dry_run(resolved, path, rest)
        except typer.TyperException as exc:
            pytest.fail(f"{_id(command)}: {exc.format_message()}")


def test_a_wrong_command_line_is_caught() -> None:
    # The mistake the README once made, and others of its kind: each one fails the dry run.
    for words in (("keys", "create", "TENANT"), ("keys", "list"), ("queue", "--bogus")):
        path, resolved, rest = _resolve(words)
        with pytest.raises(typer.TyperException, match=r"Missing|No such|unexpected"):
            _dry_run(resolved, path, rest)
    assert _resolve(("nope",))[0] == ()
