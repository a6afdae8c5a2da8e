"""A Celery configuration module (``CELERY_CONFIG_MODULE``) whose worker dies at start-up.

Celery reads this module in the real ``om worker`` process, on top of om's own settings, so a
test sees what a supervisor sees when a worker meets an unrecoverable error: Celery logs
``Unrecoverable error`` and stops, and the process's exit code must say it failed.
"""

from __future__ import annotations

from celery.worker.consumer import Consumer  # type: ignore[import-untyped]

MESSAGE = "the test's consumer cannot start"

worker_consumer = f"{__name__}:DyingConsumer"


class DyingConsumer(Consumer):  # type: ignore[misc]
    """Raises when the worker starts it, as a consumer step meeting an unrecoverable error."""

    def start(self) -> None:
        """Raises :class:`RuntimeError` (``MESSAGE``) every time."""
        raise RuntimeError(MESSAGE)
