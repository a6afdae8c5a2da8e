"""A deployment's own observer/reflector instructions: the file ``OM_PROMPTS_FILE`` names.

The file is JSON (``.json``) or TOML (any other name, ``.toml`` by convention) with a
``version`` and at least one of ``observer`` and ``reflector``; a text left out keeps the
built-in one (:mod:`om_core.flush.prompts`)::

    version = "ours-1"
    observer = \"\"\"You are the observer ...\"\"\"

It is read once, when the process builds its services, and every problem is a
:class:`~om_workers.errors.ConfigError` naming the file and what is wrong, so a typo stops the
API and the worker at start-up instead of silently running the default prompts.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from om_core.flush.prompts import CUSTOM_PROMPTS_VERSION, DEFAULT_PROMPTS, PromptSet
from om_workers.errors import ConfigError

PROMPT_KEYS = ("observer", "reflector")
MAX_VERSION_CHARS = 64
# Far above any useful instructions, far below what would crowd out the transcript.
MAX_INSTRUCTION_CHARS = 32_000


def load_prompts(path: Path | None) -> PromptSet:
    """The prompt set of ``path`` (the built-in set when ``path`` is ``None``).

    Raises :class:`ConfigError` when the file cannot be read or parsed, is not a table/object,
    has unknown keys, lacks a ``version`` or both texts, or has a value of the wrong shape.
    """
    if path is None:
        return DEFAULT_PROMPTS
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"OM_PROMPTS_FILE {path}: cannot read it ({exc.strerror})") from None
    try:
        data: Any = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
        raise ConfigError(f"OM_PROMPTS_FILE {path}: not valid {kind}: {exc}") from None
    return parse_prompts(data, where=f"OM_PROMPTS_FILE {path}")


def parse_prompts(data: Any, *, where: str = "prompts") -> PromptSet:
    """A :class:`PromptSet` from a parsed file (see the module docstring); raises
    :class:`ConfigError` prefixed with ``where``."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table with version, observer, reflector")
    unknown = sorted(set(data) - {"version", *PROMPT_KEYS})
    if unknown:
        raise ConfigError(
            f"{where}: unknown keys {unknown} (expected version, observer, reflector)"
        )
    version = data.get("version")
    if not isinstance(version, str) or not version.strip():
        raise ConfigError(f"{where}: needs a version, a non-empty string naming these prompts")
    version = version.strip()
    if len(version) > MAX_VERSION_CHARS or version == CUSTOM_PROMPTS_VERSION:
        raise ConfigError(
            f"{where}: version must be at most {MAX_VERSION_CHARS} characters and not "
            f"{CUSTOM_PROMPTS_VERSION!r} (that name marks instructions set elsewhere)"
        )
    if not any(key in data for key in PROMPT_KEYS):
        raise ConfigError(f"{where}: names neither observer nor reflector instructions")
    texts = {key: _text(data, key, where) for key in PROMPT_KEYS}
    return PromptSet(
        version=version,
        observer=texts["observer"] or DEFAULT_PROMPTS.observer,
        reflector=texts["reflector"] or DEFAULT_PROMPTS.reflector,
    )


def _text(data: dict[str, Any], key: str, where: str) -> str | None:
    if key not in data:
        return None
    value = data[key]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {key} must be a non-empty string")
    if len(value) > MAX_INSTRUCTION_CHARS:
        raise ConfigError(
            f"{where}: {key} is {len(value)} characters (at most {MAX_INSTRUCTION_CHARS})"
        )
    return value.strip()
