"""Memory ids: 12 lowercase hex characters (``^[a-f0-9]{12}$``)."""

from __future__ import annotations

import re
import secrets

from om_core.errors import InvalidMemoryIdError

MEMORY_ID_PATTERN = re.compile(r"^[a-f0-9]{12}$")
OBSERVATION_REF_PREFIX = "om:"
REFLECTION_REF_PREFIX = "reflection:"


def create_memory_id() -> str:
    """Return a fresh random memory id (48 bits from :mod:`secrets`)."""
    return secrets.token_hex(6)


def is_memory_id(value: object) -> bool:
    """True when ``value`` is a string of exactly 12 lowercase hex characters."""
    return isinstance(value, str) and MEMORY_ID_PATTERN.fullmatch(value) is not None


def parse_memory_ref(value: object) -> str:
    """Return the bare id of ``abc...``, ``om:abc...`` or ``reflection:abc...``.

    Raises :class:`InvalidMemoryIdError` for anything else, before any lookup happens.
    """
    if isinstance(value, str):
        for prefix in (OBSERVATION_REF_PREFIX, REFLECTION_REF_PREFIX):
            if value.startswith(prefix):
                value = value[len(prefix) :]
                break
        if is_memory_id(value):
            return value
    raise InvalidMemoryIdError(f"invalid memory id {value!r}: expected 12 lowercase hex characters")
