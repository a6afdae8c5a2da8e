"""Narrowing a tenant-wide search to the sessions whose metadata holds given values.

``GET /v1/search?q=...&metadata=customer:acme&metadata=subject:alice`` searches only the
tenant's sessions whose metadata holds, for every pair, the top-level ``key`` with exactly
the string ``value`` (a number, a list or another JSON value never matches, so both stores
agree). The sessions are found first, at most :data:`MAX_NARROWED_SESSIONS` of them, through
an index of each session's :func:`narrowable_pairs` (finding them costs what they are, not
the tenant's sessions). A hit's key does not depend on the scope it was found in (terms are
weighed by the whole index's counts), so searching the sessions together, or each one and
merging their best keys, gives the tenant-wide ranking restricted to those sessions, and
cursors chain as they do without narrowing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from om_core.errors import InvalidSearchQueryError
from om_core.policy.storable import char_problem

MAX_NARROWING_PAIRS = 8
"""Most ``key:value`` pairs one search narrows by."""
MAX_NARROWING_KEY_CHARS = 128
"""Longest key of a pair, in characters."""
MAX_NARROWING_VALUE_CHARS = 256
"""Longest value of a pair, in characters."""
MAX_NARROWED_SESSIONS = 100
"""Most sessions a narrowed search may match: their keys are written into every statement of
the search (and SQLite, in an index far larger than the set, searches each session alone), so
more would cost more than the narrowing saves (a search without narrowing covers the whole
tenant at once)."""

_KEY = re.compile(rf"[A-Za-z0-9_.\-]{{1,{MAX_NARROWING_KEY_CHARS}}}")
"""A key: letters, digits, ``_``, ``.`` and ``-`` (revision 0019 indexes the stored sessions'
keys by the same pattern, written in each store's SQL)."""


@dataclass(frozen=True)
class MetadataNarrowing:
    """The ``(key, value)`` pairs a session's metadata must all hold, keys distinct."""

    pairs: tuple[tuple[str, str], ...]


def narrowable_pairs(metadata: Mapping[str, object]) -> list[tuple[str, str]]:
    """The ``(key, value)`` pairs of a session's ``metadata`` that a narrowing can name, in
    key order: each top-level key :func:`parse_narrowing` accepts whose value is a string it
    accepts. A session matches a narrowing exactly when every pair of the narrowing is one of
    these, so a store indexes them when the session is created (its metadata never changes)."""
    return sorted(
        (key, value)
        for key, value in metadata.items()
        if isinstance(key, str)
        and _KEY.fullmatch(key) is not None
        and isinstance(value, str)
        and value_problem(value) is None
    )


def value_problem(value: str) -> str | None:
    """Why no narrowing can give ``value``, so that no metadata pair holding it is indexed
    (the reason names no character of it); ``None`` if one can."""
    if char_problem(value) is not None:
        return "a value holds NUL or a lone surrogate, which no session's metadata can"
    if len(value) > MAX_NARROWING_VALUE_CHARS:
        return f"a value is at most {MAX_NARROWING_VALUE_CHARS} characters"
    return None


def parse_narrowing(values: Sequence[str] | None) -> MetadataNarrowing | None:
    """The narrowing ``values`` ask for (each ``key:value``, split at the first colon), or
    ``None`` for none.

    Raises :class:`InvalidSearchQueryError` for a value without a colon, a key that is not 1
    to :data:`MAX_NARROWING_KEY_CHARS` of ``[A-Za-z0-9_.-]``, a value over
    :data:`MAX_NARROWING_VALUE_CHARS` characters or holding NUL or a lone surrogate, a key
    given twice, or more than :data:`MAX_NARROWING_PAIRS` pairs. The errors name the pair by
    its position, never its text (a value may be anything a client stored).
    """
    if not values:
        return None
    if len(values) > MAX_NARROWING_PAIRS:
        raise InvalidSearchQueryError(
            f"metadata narrows by at most {MAX_NARROWING_PAIRS} key:value pairs, not {len(values)}"
        )
    pairs: dict[str, str] = {}
    for number, raw in enumerate(values, start=1):
        key, colon, value = raw.partition(":")
        if not colon:
            raise InvalidSearchQueryError(f"metadata pair {number} is not key:value")
        if _KEY.fullmatch(key) is None:
            raise InvalidSearchQueryError(
                f"metadata pair {number}: a key is 1-{MAX_NARROWING_KEY_CHARS} letters, "
                "digits, '_', '.' or '-'"
            )
        problem = value_problem(value)
        if problem is not None:
            raise InvalidSearchQueryError(f"metadata pair {number}: {problem}")
        if key in pairs:
            raise InvalidSearchQueryError(f"metadata pair {number} names a key given before")
        pairs[key] = value
    return MetadataNarrowing(tuple(pairs.items()))
