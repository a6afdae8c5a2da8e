"""Structured logs for every ``om`` process: one redacted JSON object per line.

The API, the workers, beat and Flower all write the same shape: ``time``, ``level``,
``logger``, ``message``, the context of the work at hand (``request_id``, ``job_id``,
``tenant_id``, ``session_id``: whichever are known, bound with :func:`log_context`, or with
:func:`bind_log_context` once they become known inside a block; ``trace_id`` and ``span_id``
of the current span when tracing is on) and any ``extra=`` fields.
Known secrets are replaced in the rendered line with :func:`om_core.policy.redaction.redact`, the
one
redaction function of the system, so a secret echoed inside an exception message or traceback
is never written either.

Celery's start-up banners (the worker's and beat's configuration summary) are not log
records: Celery prints them to stdout as plain text. Every log record goes to stderr as JSON.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Final

from om_core.policy.redaction import redact
from om_workers.telemetry.tracing import current_ids

MIN_SECRET_CHARS: Final = 6
"""Shorter values are not treated as secrets: redacting ``"a"`` everywhere would garble logs."""

CONTEXT_FIELDS: Final = ("request_id", "job_id", "tenant_id", "session_id")
_CONTEXT: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("om_log_context")

# Attributes every LogRecord has; anything else was passed with ``extra=`` and is logged.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}
HANDLER_NAME: Final = "om.json"


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret of at least :data:`MIN_SECRET_CHARS` characters redacted."""
    return redact(text, (s for s in secrets if len(s) >= MIN_SECRET_CHARS))


@contextmanager
def log_context(**fields: str) -> Iterator[None]:
    """Add ``fields`` (of :data:`CONTEXT_FIELDS`) to every record logged inside the block, in
    this thread or task; nested blocks add to the outer one's."""
    # A new dict for every block: bind_log_context adds to this block's dict only.
    token = _CONTEXT.set({**_CONTEXT.get({}), **fields})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def bind_log_context(**fields: str) -> None:
    """Add ``fields`` (of :data:`CONTEXT_FIELDS`) to the innermost :func:`log_context` block,
    for the rest of that block, as seen from every thread and task that inherited the block.

    For ids that become known inside a unit of work: the API learns a request's tenant in a
    handler thread (which runs on a copy of the request's context), and the request line
    logged after the handler returns carries it, because the copy shares the block's fields.
    Outside any block the call does nothing: there is no unit of work to describe, and
    binding for the rest of a thread's life would label unrelated lines.
    """
    current = _CONTEXT.get(None)
    if current is not None:
        current.update(fields)


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring); ``secrets`` returns the values
    to redact at the time of each record."""

    def __init__(self, secrets: Callable[[], Iterable[str]] = tuple) -> None:
        super().__init__()
        self._secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_CONTEXT.get({}),
        }
        ids = current_ids()
        if ids is not None:
            payload["trace_id"], payload["span_id"] = ids
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        line = json.dumps(payload, default=str, ensure_ascii=False)
        # Redact the rendered line, so a secret inside any field or traceback is caught.
        return redact_text(line, self._secrets())


def configure_json_logging(
    loggers: Iterable[str | None],
    level: str = "INFO",
    secrets: Callable[[], Iterable[str]] = tuple,
) -> logging.Handler:
    """Send the named loggers (``None``: the root logger) to stderr as redacted JSON; returns
    the handler. Idempotent: calling again replaces the handler this function installed, and
    any other handler of those loggers (Celery's, uvicorn's), so every line is JSON."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(secrets))
    handler.set_name(HANDLER_NAME)
    for name in loggers:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(level.upper())
        logger.propagate = name is None
    return handler
