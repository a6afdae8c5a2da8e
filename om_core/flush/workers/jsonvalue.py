"""Measuring tool arguments and results: strict JSON, bounded depth, no cycles, exact bytes.

Sizes are the UTF-8 length of compact JSON (``separators=(",", ":")``, ``ensure_ascii=False``),
the same encoding whichever path measures them, so a limit means the same thing everywhere.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from om_core.errors import WorkerProtocolError
from om_core.policy.redaction import redact

MAX_JSON_DEPTH = 64
_TRUNCATION_MARK = "…"


def json_bytes(value: Any, *, what: str, max_depth: int = MAX_JSON_DEPTH) -> int:
    """Byte size of ``value`` as compact JSON, after checking it is plain, finite, acyclic JSON.

    Raises :class:`WorkerProtocolError` naming ``what`` for a cycle, nesting deeper than
    ``max_depth``, a non-string key, or a value JSON cannot carry (NaN, sets, objects ...).
    """
    _check_json(value, what=what, depth=0, max_depth=max_depth, stack=set())
    return len(dump_json(value).encode("utf-8"))


def dump_json(value: Any) -> str:
    """Compact JSON text of an already-checked value."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _check_json(value: Any, *, what: str, depth: int, max_depth: int, stack: set[int]) -> None:
    if depth > max_depth:
        raise WorkerProtocolError(f"{what} nests deeper than {max_depth} levels")
    if value is None or isinstance(value, bool | str | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise WorkerProtocolError(f"{what} holds a non-finite number")
        return
    if not isinstance(value, dict | list | tuple):
        raise WorkerProtocolError(f"{what} holds a non-JSON value of type {type(value).__name__}")
    marker = id(value)
    if marker in stack:
        raise WorkerProtocolError(f"{what} is cyclic")
    stack.add(marker)
    items: Iterable[Any]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise WorkerProtocolError(f"{what} has a non-string key")
        items = value.values()
    else:
        items = value
    for item in items:
        _check_json(item, what=what, depth=depth + 1, max_depth=max_depth, stack=stack)
    stack.discard(marker)


def bounded_error(text: str, secrets: Iterable[str], max_bytes: int) -> str:
    """Error text with every known secret redacted, cut to at most ``max_bytes`` UTF-8 bytes.

    Redaction happens first (it may lengthen the text), then the cut, on a character boundary,
    ends with ``…`` so a reader can tell the text was cut.
    """
    text = redact(text, secrets)
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    room = max(0, max_bytes - len(_TRUNCATION_MARK.encode("utf-8")))
    cut = encoded[:room].decode("utf-8", errors="ignore")
    return cut + _TRUNCATION_MARK if room else ""
