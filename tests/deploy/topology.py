"""The deployment files as data: compose services with ``${VAR}`` interpolation, Kubernetes
documents, the Dockerfile's instructions, and what the ``om`` command line and the settings
accept. Shared by the manifest tests and the local rehearsal (:mod:`tests.deploy.rehearsal`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final

import typer.main
import yaml

from om_api.cli import app as cli_app
from om_workers.config import Settings
from om_workers.settings_env import env_names

ROOT: Final = Path(__file__).resolve().parents[2]
DEPLOY: Final = ROOT / "deploy"
COMPOSE_FILE: Final = DEPLOY / "compose.yaml"
ENV_EXAMPLE: Final = DEPLOY / "env.example"
DOCKERFILE: Final = DEPLOY / "Dockerfile"
K8S: Final = DEPLOY / "k8s"

NON_OM_ENV: Final = {
    "POSTGRES_USER": "postgres image: role it creates",
    "POSTGRES_PASSWORD": "postgres image: that role's password (also inside OM_DATABASE_URL)",
    "POSTGRES_DB": "postgres image: database it creates",
    "REDISCLI_AUTH": "redis image: password redis-cli uses for the health check",
    "REDIS_PASSWORD": "compose interpolation only: Redis requirepass",
    "REDIS_MAXMEMORY": "compose interpolation only: Redis maxmemory",
    "OM_IMAGE": "compose interpolation only: the image every om service runs",
    "WORKER_REPLICAS": "compose interpolation only: how many worker containers start",
    "API_PORT": "compose interpolation only: the host port the API is published on",
    "FLOWER_PORT": "compose interpolation only: the host port Flower is published on",
}
"""Variables that are not read by the om settings, and who reads them instead."""

INTERPOLATION_ONLY: Final = {
    "REDIS_PASSWORD",
    "REDIS_MAXMEMORY",
    "OM_IMAGE",
    "WORKER_REPLICAS",
    "API_PORT",
    "FLOWER_PORT",
}
"""Variables of ``env.example`` that compose substitutes into the file; no container gets them."""

_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


class InterpolationError(ValueError):
    """A required variable (``${VAR:?message}``) is unset or empty."""


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """``value`` with every ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?message}`` replaced
    from ``env``, recursively through lists and mappings, as ``docker compose`` does.

    Raises :class:`InterpolationError` for a required variable that is unset or empty.
    """
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name, op, arg = match.group("name"), match.group("op"), match.group("arg") or ""
            found = env.get(name)
            if op in (":-", "-"):
                empty = not found if op == ":-" else found is None
                return arg if empty else str(found)
            if op in (":?", "?"):
                if not found:
                    raise InterpolationError(f"{name}: {arg}")
                return found
            return found or ""

        return _VAR.sub(replace, value)
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    return value


def variables_in(value: Any) -> set[str]:
    """Names of every ``${VAR}`` used in ``value`` (recursively)."""
    if isinstance(value, str):
        return {match.group("name") for match in _VAR.finditer(value)}
    if isinstance(value, list):
        return set().union(*(variables_in(item) for item in value))
    if isinstance(value, dict):
        return set().union(*(variables_in(item) for item in value.values()))
    return set()


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=value`` lines of an env file (comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path.name}: not KEY=value: {line!r}")
            values[key.strip()] = value.strip()
    return values


def load_compose() -> dict[str, Any]:
    """``deploy/compose.yaml`` parsed (YAML anchors and merge keys resolved), uninterpolated."""
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@dataclass(frozen=True)
class ComposeService:
    """One compose service, interpolated."""

    name: str
    spec: Mapping[str, Any]

    @property
    def command(self) -> list[str]:
        raw = self.spec.get("command", [])
        return shlex.split(raw) if isinstance(raw, str) else [str(part) for part in raw]

    @property
    def environment(self) -> dict[str, str]:
        raw = self.spec.get("environment", {})
        if isinstance(raw, list):
            return dict(str(item).partition("=")[::2] for item in raw)
        return {str(key): "" if value is None else str(value) for key, value in raw.items()}

    @property
    def runs_om(self) -> bool:
        return bool(self.command) and self.command[0] == "om"

    @property
    def depends_on(self) -> dict[str, str]:
        raw = self.spec.get("depends_on", {})
        if isinstance(raw, list):
            return {str(name): "service_started" for name in raw}
        return {
            str(name): str(cond.get("condition", "service_started")) for name, cond in raw.items()
        }


def example_env(**overrides: str) -> dict[str, str]:
    """``env.example`` with every empty (secret) value filled, plus ``overrides``."""
    env = read_env_file(ENV_EXAMPLE)
    filled = {
        key: value or f"example-{key.lower().replace('_', '-')}" for key, value in env.items()
    }
    filled["OM_FLOWER_BASIC_AUTH"] = "om:example-password"
    filled.update(overrides)
    return filled


def compose_services(env: Mapping[str, str] | None = None) -> dict[str, ComposeService]:
    """Every compose service, interpolated with ``env`` (default: :func:`example_env`)."""
    services = load_compose()["services"]
    values = example_env() if env is None else env
    return {
        name: ComposeService(name, interpolate(spec, values)) for name, spec in services.items()
    }


def k8s_files(include_optional: bool = True) -> list[Path]:
    """Every Kubernetes manifest under ``deploy/k8s`` (``optional/`` too, unless told); the
    kustomization, a kustomize file rather than an object, is left out."""
    pattern = "**/*.yaml" if include_optional else "*.yaml"
    return sorted(
        path for path in K8S.glob(pattern) if path.is_file() and path.name != "kustomization.yaml"
    )


def k8s_docs(include_optional: bool = True) -> list[tuple[Path, dict[str, Any]]]:
    """Every Kubernetes document (multi-document files split), with its file."""
    docs = []
    for path in k8s_files(include_optional):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is not None:
                assert isinstance(doc, dict), path
                docs.append((path, doc))
    return docs


def pod_spec(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The pod spec of a Deployment or Job."""
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def dockerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Dockerfile, continuation lines joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line[:-1]}" if line.endswith("\\") else f"{pending} {line}"
        if not line.endswith("\\"):
            keyword, _, rest = pending.strip().partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
            pending = ""
    return instructions


# The om command line and the settings -----------------------------------------------------------


Command = Any
"""A click command object (Typer ships its own click, so it is duck-typed here)."""


def _is_group(command: Command) -> bool:
    return isinstance(getattr(command, "commands", None), dict)


@cache
def om_root() -> Command:
    """The ``om`` command as click sees it (the Typer app of :mod:`om_api.cli`)."""
    command = typer.main.get_command(cli_app)
    assert _is_group(command)
    return command


def _walk(command: Command, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Command]]:
    yield path, command
    if _is_group(command):
        for name, sub in command.commands.items():
            yield from _walk(sub, (*path, name))


def om_subcommands() -> dict[tuple[str, ...], Command]:
    """Every runnable ``om`` subcommand by its path (``("db", "upgrade")``), groups excluded."""
    return {
        path: command for path, command in _walk(om_root(), ()) if path and not _is_group(command)
    }


@dataclass(frozen=True)
class OmInvocation:
    """An ``om`` command line resolved against the real CLI."""

    path: tuple[str, ...]
    params: Mapping[str, Any]


def parse_om(argv: list[str]) -> OmInvocation:
    """Resolve ``["om", "api", "--port", "8000"]`` to its subcommand and parsed options.

    Raises ``AssertionError`` when it does not start with ``om`` or names no subcommand, and
    ``click.UsageError`` when an option or argument is not accepted.
    """
    assert argv and argv[0] == "om", f"not an om command: {argv}"
    commands = om_subcommands()
    rest = list(argv[1:])
    path: tuple[str, ...] = ()
    while rest and (*path, rest[0]) in {p[: len(path) + 1] for p in commands}:
        path = (*path, rest.pop(0))
        if path in commands:
            break
    assert path in commands, f"{argv}: no such om subcommand (known: {sorted(commands)})"
    context = commands[path].make_context(" ".join(("om", *path)), rest)
    return OmInvocation(path, dict(context.params))


def settings_env_names() -> set[str]:
    """Every environment variable :class:`om_workers.config.Settings` reads."""
    return env_names(Settings)


def cli_env_names() -> set[str]:
    """Environment variables the ``om`` options read themselves (``OM_FLOWER_BASIC_AUTH``)."""
    names: set[str] = set()
    for _, command in _walk(om_root(), ()):
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            if isinstance(envvar, str):
                names.add(envvar)
            elif isinstance(envvar, list | tuple):
                names.update(str(name) for name in envvar)
    return names


def om_env_names() -> set[str]:
    """Every variable an om process reads: the settings' and the command line's."""
    return settings_env_names() | cli_env_names()
