"""Exact-value secret redaction, shared by every render, recall and worker path."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

REDACTED = "[REDACTED]"


def normalize_secrets(secrets: Iterable[str]) -> tuple[str, ...]:
    """Distinct non-empty secrets, longest first (so a secret inside another goes second)."""
    if isinstance(secrets, tuple | frozenset):
        # Renders redact message by message with the same few secrets: sort them once.
        return _normalized(secrets)
    return _sorted(secrets)


def _sorted(secrets: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({s for s in secrets if s}, key=len, reverse=True))


@functools.lru_cache(maxsize=64)
def _normalized(secrets: tuple[str, ...] | frozenset[str]) -> tuple[str, ...]:
    return _sorted(secrets)


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every exact occurrence of each secret with ``[REDACTED]``.

    The result never contains a secret: if replacing (or the marker itself) forms one again,
    the remaining occurrences are removed until none is left.
    """
    if not secrets:
        return text  # the common case, called per message of every render
    ordered = normalize_secrets(secrets)
    if not ordered or not any(s in text for s in ordered):
        return text
    for secret in ordered:
        text = text.replace(secret, REDACTED)
    return scrub(text, ordered)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Remove every secret occurrence; unlike :func:`redact` the text never grows."""
    ordered = normalize_secrets(secrets)
    while any(s in text for s in ordered):
        for secret in ordered:
            text = text.replace(secret, "")
    return text


def redact_value(value: Any, secrets: Iterable[str]) -> Any:
    """Redact every string (keys included) inside a JSON-like value."""
    ordered = normalize_secrets(secrets)
    if not ordered:
        return value
    return _redact_value(value, ordered)


def _redact_value(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {_redact_value(k, secrets): _redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(v, secrets) for v in value]
    return value
