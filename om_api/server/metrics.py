"""Prometheus metrics of one app instance (its own registry, so apps never collide in tests).

* ``om_api_requests_total{method, route, status}`` and
  ``om_api_request_duration_seconds{method, route}``: ``route`` is the route *template*
  (``/v1/sessions/{session_id}``), never the raw path, so ids do not explode cardinality.
* ``om_api_flush_enqueue_total{outcome}``: ``published`` (a new job), ``coalesced`` (a job was
  already pending), ``idle`` (nothing to do: the session's newest job answered, nothing was
  written or published), ``unavailable`` (Redis down: the client got a 503).
* Read from Redis at each scrape (:class:`TenantLoadCollector`), so every replica reports the
  same service-wide figures: ``om_flush_backlog`` (flush jobs in the fair queue, all tenants:
  what KEDA scales on), ``om_tenant_flush_jobs{tenant, state}`` (``waiting`` in the fair
  queue, ``queued`` in the broker, ``running``) and ``om_tenant_throttled_requests_total
  {tenant}`` (requests refused by a rate limit since Redis started). ``tenant`` names the
  ``OM_METRICS_TOP_TENANTS`` busiest tenants and ``(others)`` for the rest, so the label's
  values stay bounded however many tenants there are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Final, Literal

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client import generate_latest as _generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from om_core.policy.fairness import TenantLoad, top_tenants

log = logging.getLogger("om_api")

EnqueueOutcome = Literal["published", "coalesced", "idle", "unavailable"]
CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
UNMATCHED_ROUTE: Final = "<unmatched>"


class ApiMetrics:
    """The API's counters and histograms on a private :class:`CollectorRegistry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "om_api_requests",
            "HTTP requests by method, route template and status.",
            ("method", "route", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "om_api_request_duration_seconds",
            "HTTP request latency by method and route template.",
            ("method", "route"),
            registry=self.registry,
        )
        self.enqueue = Counter(
            "om_api_flush_enqueue",
            "Flush requests by outcome: published, coalesced, idle, unavailable.",
            ("outcome",),
            registry=self.registry,
        )
        for outcome in ("published", "coalesced", "idle", "unavailable"):
            self.enqueue.labels(outcome=outcome)
        self.rate_limited = Counter(
            "om_api_rate_limited",
            "Requests refused with a 429 by request class: appends, flushes, reads.",
            ("request_class",),
            registry=self.registry,
        )
        for name in ("appends", "flushes", "reads"):
            self.rate_limited.labels(request_class=name)
        self.rate_limit_unavailable = Counter(
            "om_api_rate_limit_unavailable",
            "Requests let through unchecked because Redis was unavailable (fail open).",
            registry=self.registry,
        )
        # A request's two series, found once per (method, route, status): ``labels()`` checks
        # and joins its arguments under a lock each time, a few microseconds every request.
        # As many entries as the registry holds series, so no new bound.
        self._series: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one finished request."""
        key = (method, route, status)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = (
                self.requests.labels(method=method, route=route, status=str(status)),
                self.latency.labels(method=method, route=route),
            )
        series[0].inc()
        series[1].observe(seconds)

    def observe_enqueue(self, outcome: EnqueueOutcome) -> None:
        """Count one flush request's outcome."""
        self.enqueue.labels(outcome=outcome).inc()

    def observe_rate_limited(self, request_class: str) -> None:
        """Count one request refused over its rate limit."""
        self.rate_limited.labels(request_class=request_class).inc()

    def observe_rate_limit_unavailable(self) -> None:
        """Count one request let through because the limiter could not reach Redis."""
        self.rate_limit_unavailable.inc()

    def render(self) -> bytes:
        """The text exposition format of every metric."""
        return _generate_latest(self.registry)


ReadLoads = Callable[[], tuple[int, list[TenantLoad]]]
"""Returns the fair queue's backlog and every tenant's load; raises when Redis is down."""


class TenantLoadCollector:
    """The per-tenant flush metrics, read with ``read`` at each scrape. A scrape while Redis
    is down leaves them out (and logs a warning) instead of failing the whole scrape."""

    def __init__(self, read: ReadLoads, top_n: int) -> None:
        self._read = read
        self._top_n = top_n

    def describe(self) -> list[Metric]:
        """Nothing to describe up front: registering must not read Redis."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The three families of the module docstring."""
        try:
            backlog, loads = self._read()
        except Exception as exc:
            log.warning("tenant metrics left out: %s", type(exc).__name__)
            return
        yield GaugeMetricFamily(
            "om_flush_backlog",
            "Flush jobs in the fair queue (waiting, queued or running), all tenants.",
            value=backlog,
        )
        jobs = GaugeMetricFamily(
            "om_tenant_flush_jobs",
            "Flush jobs by tenant (top N, then (others)) and state: waiting, queued, running.",
            labels=("tenant", "state"),
        )
        throttled = CounterMetricFamily(
            "om_tenant_throttled_requests",
            "Requests refused by a rate limit since Redis started, by tenant (top N).",
            labels=("tenant",),
        )
        for load in top_tenants(loads, self._top_n) if loads else []:
            jobs.add_metric((load.tenant_id, "waiting"), load.waiting)
            jobs.add_metric((load.tenant_id, "queued"), load.queued)
            jobs.add_metric((load.tenant_id, "running"), load.running)
            throttled.add_metric((load.tenant_id,), load.throttled)
        yield jobs
        yield throttled
