"""Checks the clients run before sending anything: an input the API would refuse and the
client can already see (a malformed id, a role the API does not know, a string where a list
belongs, a page size out of range) is an :class:`~om_api.client.core.InvalidRequest` naming
the field (``session_id: ...``, ``entries[0].message.role: ...``), never a pydantic
``ValidationError`` or a ``TypeError`` from inside httpx.

The patterns and limits are the API's own (:mod:`om_api.schemas`), so nothing the server would
accept is refused here; what only the server can know (a missing session ...) it answers.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ValidationError

from om_api.client.core import from_validation, refused
from om_api.schemas import ENTRY_ID_PATTERN, MEMORY_ID_PATTERN, PATH_ID_PATTERN, SUBJECT_PATTERN

M = TypeVar("M", bound=BaseModel)

_PATH_ID: Final = re.compile(PATH_ID_PATTERN)
_ENTRY_ID: Final = re.compile(ENTRY_ID_PATTERN)
_MEMORY_ID: Final = re.compile(MEMORY_ID_PATTERN)
_SUBJECT: Final = re.compile(SUBJECT_PATTERN)
_SHOWN_CHARS: Final = 60
"""A refused value is quoted up to this many characters (it may be a whole document)."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}..."


def model(cls: type[M], **values: Any) -> M:
    """``cls`` built from ``values``; raises :class:`InvalidRequest` naming the field when
    the model refuses them."""
    try:
        return cls.model_validate(values)
    except ValidationError as exc:
        raise from_validation(exc) from None


def _matching(field: str, value: object, pattern: re.Pattern[str], expected: str) -> str:
    if not isinstance(value, str):
        raise refused(field, f"expected a string id, got {type(value).__name__}")
    if pattern.fullmatch(value) is None:
        raise refused(field, f"{_shown(value)} is not {expected}")
    return value


def path_id(field: str, value: object) -> str:
    """A session, tenant, job, key or scope id: it travels in a URL path."""
    return _matching(
        field, value, _PATH_ID, "an id (1-128 of A-Z a-z 0-9 . _ : -, not '.' or '..')"
    )


def subject(field: str, value: object) -> str:
    """A subject (the end user named by sessions' ``metadata.subject``)."""
    return _matching(field, value, _SUBJECT, "a subject (1-256 characters, no '/' or whitespace)")


def entry_id(field: str, value: object) -> str:
    """An entry id (a cursor)."""
    return _matching(field, value, _ENTRY_ID, "an entry id (1-128 of A-Z a-z 0-9 . _ : -)")


def memory_id(field: str, value: object) -> str:
    """An observation or reflection id (``0123456789ab``, ``om:...``, ``reflection:...``)."""
    return _matching(field, value, _MEMORY_ID, "a memory id (12 lowercase hex characters)")


def id_list(field: str, value: object) -> list[Any]:
    """A list of ids (or refs); a lone string is refused rather than split into characters,
    and so is a mapping (its keys would be sent)."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Collection):
        raise refused(field, f"expected a list, got {type(value).__name__} {_shown(value)}")
    return list(value)


def int_in(field: str, value: object, low: int, high: int) -> int:
    """An integer within ``low..high`` (``True`` is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise refused(field, f"expected an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise refused(field, f"must be within {low}..{high}, got {value}")
    return value


def choice(field: str, value: object, choices: Collection[str]) -> str:
    """One of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise refused(field, f"expected one of {options}, got {_shown(value)}")
    return value


def timestamp(field: str, value: object) -> str:
    """An ISO-8601 time, from a ``datetime`` or a string in that form, as the API reads it."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).isoformat()
        except ValueError:
            pass
    raise refused(field, f"expected a datetime or an ISO-8601 string, got {_shown(value)}")
