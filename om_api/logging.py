"""Structured JSON logs with request ids, and exact-value secret redaction.

Every record of the ``om_api`` logger (and of uvicorn's, once :func:`configure_logging` ran) is
one JSON object per line. Known secrets (API keys seen on requests, the admin token, the
provider key) are replaced by ``[REDACTED]`` wherever they appear in the rendered line, so a
secret echoed inside an error message is still never written.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Final

REDACTED: Final = "[REDACTED]"
REQUEST_ID_HEADER: Final = "X-Request-ID"
MIN_SECRET_CHARS: Final = 6
"""Shorter values are not treated as secrets: redacting ``"a"`` everywhere would garble logs."""

# Attributes every LogRecord has; anything else was passed with ``extra=`` and is logged.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of every secret (longest first) replaced."""
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


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


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, extras; secrets redacted."""

    def __init__(self, registry: SecretRegistry) -> None:
        super().__init__()
        self._registry = registry

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        line = json.dumps(payload, default=str, ensure_ascii=False)
        # Redact the rendered line, so a secret inside any field or traceback is caught.
        return redact_text(line, self._registry.values())


def configure_logging(registry: SecretRegistry, level: str = "INFO") -> logging.Handler:
    """Send ``om_api`` and ``uvicorn`` records to stderr as redacted JSON; returns the handler.

    Idempotent per registry: calling again replaces the earlier handler of this module.
    """
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(registry))
    handler.set_name("om_api.json")
    for name in ("om_api", "uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if h.get_name() == "om_api.json"]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(level.upper())
        logger.propagate = False
    # Our request log replaces uvicorn's access log, which would log raw paths twice.
    logging.getLogger("uvicorn.access").disabled = True
    return handler
