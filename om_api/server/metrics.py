"""Prometheus metrics of one app instance (its own registry, so apps never collide in tests).

* ``om_api_requests_total{method, route, status}`` and
  ``om_api_request_duration_seconds{method, route}``: ``route`` is the route *template*
  (``/v1/sessions/{session_id}``), never the raw path, so ids do not explode cardinality.
* ``om_api_flush_enqueue_total{outcome}``: ``published`` (a new job), ``coalesced`` (a job was
  already pending), ``unavailable`` (Redis down: the client got a 503).
"""

from __future__ import annotations

from typing import Final, Literal

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client import generate_latest as _generate_latest

EnqueueOutcome = Literal["published", "coalesced", "unavailable"]
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
            "Flush requests by outcome: published, coalesced, unavailable.",
            ("outcome",),
            registry=self.registry,
        )
        for outcome in ("published", "coalesced", "unavailable"):
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

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one finished request."""
        self.requests.labels(method=method, route=route, status=str(status)).inc()
        self.latency.labels(method=method, route=route).observe(seconds)

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
