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
  reconciler's last scan of ``pending`` markers;
- ``om_model_tokens_total{tenant, model, direction}``: model tokens the provider reported,
  ``direction`` ``input`` or ``output``. ``tenant`` names the first ``OM_METRICS_TOP_TENANTS``
  tenants this process served and ``(others)`` for the rest, so the label's values stay
  bounded (and, unlike a top-N by volume, a series never moves between labels, so every
  series only grows).

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
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from om_workers.config import get_settings

log = logging.getLogger(__name__)

OUTCOMES: Final = ("succeeded", "failed", "skipped", "busy", "poison", "unknown", "unavailable")
DURATION_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
"""Seconds; a flush is a few LLM calls, so the interesting range is 0.1 s to minutes."""


OTHER_TENANTS: Final = "(others)"
DIRECTIONS: Final = ("input", "output")


class ModelTokens(Collector):
    """``om_model_tokens_total{tenant, model, direction}``: a counter whose ``tenant`` label
    is bounded to the first ``top_n`` tenants seen (then ``(others)``). ``top_n`` ``None``
    reads ``OM_METRICS_TOP_TENANTS`` at the first count."""

    def __init__(self, top_n: int | None = None) -> None:
        self._top_n = top_n
        self._named: set[str] = set()
        self._totals: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()

    def add(self, tenant_id: str, model: str, input_tokens: int, output_tokens: int) -> None:
        """Count one call's reported tokens (each count must be >= 0)."""
        if input_tokens < 0 or output_tokens < 0:
            raise ValueError("token counts must not be negative")
        with self._lock:
            label = self._label(tenant_id)
            for direction, tokens in zip(DIRECTIONS, (input_tokens, output_tokens), strict=True):
                key = (label, model, direction)
                self._totals[key] = self._totals.get(key, 0) + tokens

    def _label(self, tenant_id: str) -> str:
        if tenant_id in self._named:
            return tenant_id
        if self._top_n is None:
            self._top_n = get_settings().metrics.top_tenants
        if len(self._named) < self._top_n:
            self._named.add(tenant_id)
            return tenant_id
        return OTHER_TENANTS

    def collect(self) -> Iterable[CounterMetricFamily]:
        """The counter's samples, one per tenant label, model and direction."""
        family = CounterMetricFamily(
            "om_model_tokens",
            "Model tokens the provider reported, by tenant (first N, then (others)), model "
            "and direction (input, output).",
            labels=("tenant", "model", "direction"),
        )
        with self._lock:
            totals = dict(self._totals)
        for labels, value in sorted(totals.items()):
            family.add_metric(labels, value)
        yield family


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
        self.model_tokens = ModelTokens()
        self.registry.register(self.model_tokens)
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


__all__ = [
    "DURATION_BUCKETS",
    "METRICS",
    "OTHER_TENANTS",
    "OUTCOMES",
    "ModelTokens",
    "WorkerMetrics",
    "serve",
]
