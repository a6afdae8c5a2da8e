"""The settings reference (``docs/settings.md``) and the effective settings (``om settings``),
both rendered from :class:`om_workers.config.Settings`, group by group, so neither can drift
from the variables the code reads.

Regenerate the committed reference and the README's table of groups, from a checkout::

    python -m om_workers.settings_reference --write

``tests/docs/test_settings_reference.py`` fails while either differs from this output.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import annotated_types
from pydantic import BaseModel, SecretStr

from om_workers.config import DeliverySettings, LlmSettings, Settings
from om_workers.coordination.timing import derive_time_limits
from om_workers.settings_env import Leaf, group_models, leaves

REGENERATE: Final = "python -m om_workers.settings_reference --write"
REFERENCE_PATH: Final = Path("docs/settings.md")
README_PATH: Final = Path("README.md")
README_START: Final = (
    "<!-- settings groups (generated: python -m om_workers.settings_reference) -->"
)
README_END: Final = "<!-- end of settings groups -->"
MASK: Final = "********"

TOP_LEVEL_TITLE: Final = "Memory settings and logs"
TOP_LEVEL_INTRO: Final = (
    "The memory settings tune what a flush does (thresholds, budgets, the dropper's policy): "
    "one JSON object of nested groups, the same for the API and the workers; unset keys keep "
    "their defaults, and an unknown or removed key is refused at start-up."
)

NOT_SETTINGS: Final[Mapping[str, str]] = {
    "OM_TEST_DATABASE_URL": "tests and make test: a PostgreSQL database for the PostgreSQL "
    "legs (postgresql+psycopg://postgres@127.0.0.1:5432/om_test); unset: SQLite only.",
    "OM_LOCOMO_DATA": "make bench (section 8): the folder of LoCoMo `*.json` files; unset: "
    "the default folder docs/evaluation.md names, skipped when empty. om eval locomo takes "
    "paths.",
    "OM_TEST_REDIS_IMAGE": "tests: run the tests' private Redis as a podman container of this "
    "image (redis:7.2-alpine, built by make test-containers) instead of a redis-server child "
    "process; unset: the child process.",
}
"""Variables the docs name that no om process reads: tests and benchmarks read them."""


@dataclass(frozen=True)
class Section:
    """One group of settings as the reference and ``om settings`` show it."""

    key: str | None
    """The group's attribute (``locks``); ``None`` for the top-level settings."""
    title: str
    intro: str
    leaves: tuple[Leaf, ...]


def sections() -> Iterator[Section]:
    """The groups in the settings' own order, then the top-level settings."""
    all_leaves = leaves(Settings)
    for key, model in group_models(Settings).items():
        own = tuple(leaf for leaf in all_leaves if leaf.group == key)
        yield Section(key, str(model.model_config.get("title", key)), _intro(model), own)
    top = tuple(leaf for leaf in all_leaves if leaf.group is None)
    yield Section(None, TOP_LEVEL_TITLE, TOP_LEVEL_INTRO, top)


def _intro(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or "").split())


# The reference ---------------------------------------------------------------------------------


def render_reference() -> str:
    """``docs/settings.md``: every setting's variable, Python attribute, type, default and one
    line, group by group; then the variables that only tests and benchmarks read."""
    lines = [
        "# Settings reference",
        "",
        f"Generated from `om_workers/config.py` by `{REGENERATE}`: edit the settings, not "
        "this file (a test compares the two).",
        "",
        "Every setting is one environment variable, read by every om process (`om api`, `om "
        "worker`, `om beat`, `om flower`, `om up` and the command line). `om settings` prints "
        "the values in effect in these groups (secrets masked; `--json` for scripts). In "
        "Python: `get_settings().locks.ttl_s`; `Settings(lock_ttl_s=5)` (the variable's name "
        "without `OM_`, lower case) and `Settings(locks={'ttl_s': 5})` both build settings.",
        "",
    ]
    for section in sections():
        lines += _section(section)
    lines += [
        "## Not settings: read by tests and benchmarks",
        "",
        "| variable | what |",
        "| --- | --- |",
        *(f"| `{name}` | {what} |" for name, what in NOT_SETTINGS.items()),
    ]
    return "\n".join(lines) + "\n"


def _section(section: Section) -> list[str]:
    where = f"`settings.{section.key}.*`" if section.key else "top level of `settings`"
    lines = [f"## {section.title}", "", f"{section.intro} In Python: {where}.", ""]
    lines += [
        "| variable | attribute | type | default | what |",
        "| --- | --- | --- | --- | --- |",
    ]
    for leaf in section.leaves:
        variable = f"`{leaf.env[0]}`"
        if len(leaf.env) > 1:
            variable += " (old name: " + ", ".join(f"`{n}`" for n in leaf.env[1:]) + ")"
        description = " ".join((leaf.field.description or "").split())
        lines.append(
            f"| {variable} | `{leaf.path}` | {type_text(leaf)} | {default_text(leaf)} "
            f"| {description} |"
        )
    if section.key == "delivery":
        lines += ["", _derived_limits()]
    if section.key is None:
        lines += ["", _memory_defaults()]
    return [*lines, ""]


def _memory_defaults() -> str:
    """The memory settings' defaults, flattened: ``observation.messageTokens`` 10000 ..."""
    from om_core.settings import resolve_settings

    def flatten(prefix: str, value: Any) -> Iterator[str]:
        if isinstance(value, dict):
            for key, inner in value.items():
                yield from flatten(f"{prefix}.{key}" if prefix else key, inner)
        else:
            shown = str(value).lower() if isinstance(value, bool) else value
            yield f"`{prefix}` {shown}"

    items = ", ".join(flatten("", resolve_settings(None).to_json_dict()))
    return f"The memory settings' defaults: {items}."


def _derived_limits() -> str:
    llm, delivery = LlmSettings(), DeliverySettings()
    limits = derive_time_limits(
        http_timeout_s=llm.http_timeout_s,
        max_attempts=llm.max_attempts,
        backoff_cap_s=llm.backoff_cap_s,
        queue_wait_s=delivery.queue_wait_s,
    )
    return (
        "With the default provider settings the derived limits are: soft "
        f"{limits.soft_time_limit_s:g} s, hard {limits.hard_time_limit_s:g} s, visibility "
        f"timeout {limits.visibility_timeout_s:g} s."
    )


_TYPE_NAMES: Final[Mapping[Any, str]] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    SecretStr: "string, secret",
    Path: "file path",
    dict: "JSON object",
}


def type_text(leaf: Leaf) -> str:
    """``integer ≥ 1``, ``number > 0``, ``string, secret`` ...: the type and its bounds."""
    annotation = leaf.field.annotation
    if isinstance(annotation, types.UnionType):  # X | None: the X
        annotation = next(a for a in annotation.__args__ if a is not type(None))
    base = getattr(annotation, "__origin__", annotation)  # dict[str, Any]: dict
    name = _TYPE_NAMES.get(base, getattr(base, "__name__", str(base)))
    if leaf.secret and "secret" not in name:
        name += ", secret"
    bounds = []
    for item in leaf.field.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(item, attr, None)
            if value is not None:
                bounds.append(f"{sign} {_number(value)}")
        if isinstance(item, annotated_types.MinLen) and item.min_length > 0:
            name += ", not empty"
    return f"{name} {', '.join(bounds)}" if bounds else name


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def default_text(leaf: Leaf) -> str:
    """The default as a reader writes it: ``60``, ``true``, ``unset`` (always, for a secret)."""
    field = leaf.field
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if value is None or leaf.secret:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return f"`{value}`" if value else "`{}`"
    return f"`{value}`"


# The effective settings -------------------------------------------------------------------------


def effective(settings: Settings) -> dict[str, Any]:
    """The settings in effect, grouped as the model (``{"locks": {"ttl_s": 60.0}}``), JSON
    ready: secrets as ``"********"`` (``None`` when unset) and a URL's password masked."""
    out: dict[str, Any] = {}
    for leaf in leaves(Settings):
        value = display_value(leaf, settings)
        if leaf.group is None:
            out[leaf.name] = value
        else:
            out.setdefault(leaf.group, {})[leaf.name] = value
    return out


def display_value(leaf: Leaf, settings: Settings) -> Any:
    """One setting's value as it may be printed (see :func:`effective`)."""
    owner: Any = settings if leaf.group is None else getattr(settings, leaf.group)
    value = getattr(owner, leaf.name)
    if value is None:
        return None
    if leaf.secret:
        return MASK
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, str):
        return redact_url(value)
    return value


def from_environment(leaf: Leaf, settings: Settings) -> bool:
    """True when the setting was given (by its variable or a keyword), not defaulted."""
    owner: BaseModel = settings if leaf.group is None else getattr(settings, leaf.group)
    return leaf.name in owner.model_fields_set


def redact_url(text: str) -> str:
    """``scheme://user:***@host/...`` for a URL with a password; anything else unchanged."""
    scheme, sep, rest = text.partition("://")
    if not sep or "@" not in rest:
        return text
    credentials, _, location = rest.rpartition("@")
    if ":" not in credentials:
        return text
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{location}"


def render_groups() -> str:
    """The README's table of groups: each group, linked to its section of docs/settings.md,
    and its variables."""
    lines = ["| group | variables |", "| --- | --- |"]
    for section in sections():
        names = ", ".join(f"`{leaf.env[0]}`" for leaf in section.leaves)
        lines.append(f"| [{section.title}]({REFERENCE_PATH}#{anchor(section.title)}) | {names} |")
    return "\n".join(lines) + "\n"


def anchor(heading: str) -> str:
    """The fragment a Markdown renderer gives a heading: ``HTTP API`` -> ``http-api``."""
    kept = "".join(c for c in heading.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def with_groups(readme: str) -> str:
    """``readme`` with the text between its group-table markers replaced by
    :func:`render_groups`. Raises ``ValueError`` when the markers are missing."""
    head, start, rest = readme.partition(README_START)
    _, end, tail = rest.partition(README_END)
    if not start or not end:
        raise ValueError(f"README.md lacks the markers {README_START!r} ... {README_END!r}")
    return f"{head}{README_START}\n{render_groups()}{README_END}{tail}"


def main(argv: list[str]) -> int:
    """Print the reference; with ``--write``, write it to docs/settings.md and the table of
    groups into README.md (run from the checkout). Returns the exit code."""
    if argv == ["--write"]:
        REFERENCE_PATH.write_text(render_reference(), encoding="utf-8")
        README_PATH.write_text(with_groups(README_PATH.read_text(encoding="utf-8")), "utf-8")
        return 0
    if argv:
        sys.stderr.write(f"usage: {REGENERATE.removesuffix(' --write')} [--write]\n")
        return 2
    sys.stdout.write(render_reference())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


__all__ = [
    "NOT_SETTINGS",
    "REGENERATE",
    "Section",
    "display_value",
    "effective",
    "from_environment",
    "redact_url",
    "render_groups",
    "render_reference",
    "sections",
    "type_text",
    "with_groups",
]
