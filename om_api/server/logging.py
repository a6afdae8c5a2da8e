"""The API's logs: JSON lines (:mod:`om_workers.logs`) with the request's context, and the
registry of the secrets they redact (API keys seen on requests, the admin token, the provider
key).

Every line logged while a request is served carries the fields the workers use, whichever are
known: ``request_id`` (from the first byte), ``session_id`` and ``job_id`` (from the route's
path), ``tenant_id`` (once the API key is resolved; an admin route's path tenant), and the
``job_id`` a flush request was given. One :func:`~om_workers.logs.log_context` block per
request holds them (:func:`om_api.server.app.create_app` opens it outside every other layer);
code that learns an id binds it with :func:`bind_log_context`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Final

from om_core.policy.redaction import REDACTED
from om_workers.logs import (
    MIN_SECRET_CHARS,
    JsonFormatter,
    bind_log_context,
    configure_json_logging,
    redact_text,
)

REQUEST_ID_HEADER: Final = "X-Request-ID"

__all__ = [
    "MIN_SECRET_CHARS",
    "REDACTED",
    "REQUEST_ID_HEADER",
    "JsonFormatter",
    "SecretRegistry",
    "bind_log_context",
    "configure_logging",
    "redact_text",
]


class SecretRegistry:
    """The set of exact values to redact; thread-safe, grows as keys are seen."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self._lock = threading.Lock()
        self._values: frozenset[str] = frozenset(
            s for s in secrets if s is not None and len(s) >= MIN_SECRET_CHARS
        )

    def add(self, secret: str) -> None:
        """Remember one more value to redact (e.g. an API key presented on a request)."""
        if len(secret) < MIN_SECRET_CHARS or secret in self._values:
            return
        with self._lock:
            self._values = self._values | {secret}

    def values(self) -> frozenset[str]:
        """The current values (a snapshot)."""
        return self._values


def configure_logging(registry: SecretRegistry, level: str = "INFO") -> logging.Handler:
    """Send the service's own records (``om_api``, and ``om_workers`` and ``om_core``, whose
    store and Redis code the API runs) and ``uvicorn``'s to stderr as redacted JSON at
    ``level`` (the shape every ``om`` process writes, :mod:`om_workers.logs`), and every
    other library's warnings the same way; returns the handler. Idempotent.

    Without the root logger's handler a library's warning (or one of ours not named here)
    would reach Python's last-resort handler: plain text, and never redacted."""
    configure_json_logging([None], "WARNING", registry.values)
    handler = configure_json_logging(
        ("om_api", "om_workers", "om_core", "uvicorn", "uvicorn.error", "uvicorn.access"),
        level,
        registry.values,
    )
    # Our request log replaces uvicorn's access log, which would log raw paths twice.
    logging.getLogger("uvicorn.access").disabled = True
    return handler
