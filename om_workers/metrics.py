"""Prometheus metrics of a worker process, on a private registry served over HTTP.

Names (all prefixed ``om_worker_``; counters gain ``_total`` in the exposition):

- ``om_worker_flush_jobs_total{outcome}``: ``om.flush`` messages handled, by outcome
  (``succeeded``, ``failed``, ``skipped``, ``busy``, ``poison``, ``unknown``, ``unavailable``);
- ``om_worker_flush_duration_seconds{outcome}``: wall time of jobs that ran the
  pipeline (``succeeded``/``failed``), seconds;
- ``om_worker_lock_lost_total``: session locks found lost during a job;
- ``om_worker_fence_rejections_total``: memory appends refused by the store's epoch fence;
- ``om_worker_redeliveries_total``: attempts to run a job that had been attempted before (the
  message came back after a crash, a time limit or a broker reconnect);
- ``om_worker_flush_coalesced_total``: flush requests served by a job that was not their own
  (a job claimed another job's ``pending`` marker, or a reconciler request found one pending);
- ``om_worker_pending_flushes`` and ``om_worker_pending_oldest_age_seconds``: from the
  reconciler's last scan of ``pending`` markers.

The registry is private (not prometheus_client's global one), so the API's metrics and these
never collide when both live in one process (tests). :func:`serve` starts the HTTP endpoint;
the worker calls it from a Celery signal when ``OM_WORKER_METRICS_PORT`` is set.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

OUTCOMES: Final = ("succeeded", "failed", "skipped", "busy", "poison", "unknown", "unavailable")
DURATION_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
"""Seconds; a flush is a few LLM calls, so the interesting range is 0.1 s to minutes."""


class WorkerMetrics:
    """The worker's counters, histogram and gauges on their own :class:`CollectorRegistry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.jobs = Counter(
            "om_worker_flush_jobs",
            "om.flush messages handled, by outcome.",
            ("outcome",),
            registry=self.registry,
        )
        self.duration = Histogram(
            "om_worker_flush_duration_seconds",
            "Wall time of flush jobs that ran the pipeline, by outcome (seconds).",
            ("outcome",),
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.lock_lost = Counter(
            "om_worker_lock_lost", "Session locks lost during a flush job.", registry=self.registry
        )
        self.fence_rejections = Counter(
            "om_worker_fence_rejections",
            "Memory appends refused by the store's epoch fence.",
            registry=self.registry,
        )
        self.redeliveries = Counter(
            "om_worker_redeliveries",
            "Attempts to run a job that was attempted before.",
            registry=self.registry,
        )
        self.coalesced = Counter(
            "om_worker_flush_coalesced",
            "Flush requests served by a job that was not their own.",
            registry=self.registry,
        )
        self.pending = Gauge(
            "om_worker_pending_flushes",
            "Pending flush markers at the reconciler's last scan.",
            registry=self.registry,
        )
        self.pending_age = Gauge(
            "om_worker_pending_oldest_age_seconds",
            "Age of the oldest pending flush marker at the reconciler's last scan (seconds).",
            registry=self.registry,
        )
        for outcome in OUTCOMES:  # export zeros, so rates work before the first event
            self.jobs.labels(outcome=outcome)

    def observe_job(self, outcome: str, seconds: float | None) -> None:
        """Count one handled message; ``seconds`` is the job's wall time when it ran."""
        self.jobs.labels(outcome=outcome).inc()
        if seconds is not None:
            self.duration.labels(outcome=outcome).observe(seconds)

    def observe_pending(self, ages_s: Iterable[float]) -> None:
        """Set the pending gauges from one scan's marker ages (seconds)."""
        ages = list(ages_s)
        self.pending.set(len(ages))
        self.pending_age.set(max(ages, default=0.0))


METRICS: Final = WorkerMetrics()
"""The process's worker metrics (one per process, like the registry it is served from)."""

_served: dict[tuple[str, int], object] = {}
_serve_lock = threading.Lock()


def serve(port: int, host: str = "127.0.0.1") -> bool:
    """Serve :data:`METRICS` at ``http://host:port/metrics`` from a daemon thread.

    Idempotent per ``(host, port)``; ``port == 0`` serves nothing and returns False. Returns
    True when the server runs. Raises ``OSError`` when the port cannot be bound.
    """
    if port == 0:
        return False
    with _serve_lock:
        if (host, port) not in _served:
            _served[(host, port)] = start_http_server(port, addr=host, registry=METRICS.registry)
            log.info("worker metrics on http://%s:%d/metrics", host, port)
    return True


__all__ = ["DURATION_BUCKETS", "METRICS", "OUTCOMES", "WorkerMetrics", "serve"]
