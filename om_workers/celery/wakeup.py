"""A worker notices a warm shutdown within a second, whatever its broker.

Celery's event loop (kombu's hub) sleeps in ``epoll`` until its next timer, up to 10 s (the
longest interval Celery gives the loop's timer). The SIGTERM handler only sets a flag, and
Python resumes an interrupted ``epoll``, so an idle worker on RabbitMQ could take 10 s to
begin its warm shutdown (the Redis transport wakes the loop every second by itself). A
consumer bootstep keeps a timer of :data:`WAKE_INTERVAL_S` on the hub, so the loop looks at
the flag that often.
"""

from __future__ import annotations

from typing import Any

from celery import bootsteps  # type: ignore[import-untyped]

WAKE_INTERVAL_S = 1.0
"""Longest sleep of the worker's event loop, seconds: how late a warm shutdown may begin."""


def _look_at_the_flags() -> None:
    """The timer's body: waking the loop is all it is for."""


class WakeForShutdown(bootsteps.StartStopStep):  # type: ignore[misc]
    """Keeps a :data:`WAKE_INTERVAL_S` timer on the consumer's hub while the consumer runs
    (started again at every reconnect, cancelled at stop); nothing without a hub (a pool
    that runs no event loop)."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.entry: Any = None

    def start(self, parent: Any) -> None:
        if parent.hub is not None and self.entry is None:
            self.entry = parent.hub.call_repeatedly(WAKE_INTERVAL_S, _look_at_the_flags)

    def stop(self, parent: Any) -> None:
        if self.entry is not None:
            self.entry.cancel()
            self.entry = None

    shutdown = stop


__all__ = ["WAKE_INTERVAL_S", "WakeForShutdown"]
