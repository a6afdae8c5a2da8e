"""Per-API-key rate limits at the API edge: which class a request spends, the tenant's
effective limits, and the 429 when a key is over them.

Checked in the authentication dependency (:func:`om_api.server.auth.require_tenant`), before
the route body runs, so a refused request writes nothing. Admin routes and health/metrics do
not authenticate with a key and are never limited.

Budgets live in Redis (:class:`om_workers.coordination.rate_limit.RateLimiter`), so they hold
across API replicas. When Redis cannot be reached the limiter fails *open*: the request goes
on (reads that need only the database keep working during a Redis outage), a warning is logged
and ``om_api_rate_limit_unavailable`` counts it. Failing closed would turn a Redis outage into
an outage of every route.

A tenant's overrides (``tenants.rate_limits``) are kept in the process for
``OM_RATE_LIMIT_CACHE_S`` (2 s by default), so an admin's change reaches every replica within
that time without a database read per request.

A busy key does not cost a Redis round trip (and a thread-pool hop) per request: the process
takes a *lease* of several requests from the key's shared bucket at once
(:func:`~om_core.policy.rate_limit.lease_size`: a twentieth of the burst or of a second at the
rate, one for small limits) and spends it locally for up to :data:`LEASE_S`. Every request
still comes out of the one bucket in Redis, so replicas together never admit more than the
limit; a lease only moves tokens earlier (a key's burst may reach one lease more per replica),
and one a process did not use is lost, not given twice.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Final

from om_api.schemas import RateLimitOut, RateLimitsOut
from om_api.server.errors import ApiError
from om_api.server.metrics import ApiMetrics
from om_core.policy.rate_limit import (
    REQUEST_CLASSES,
    RateLimit,
    RequestClass,
    lease_size,
    retry_after_header_s,
)
from om_workers.config import Settings
from om_workers.coordination.rate_limit import RateLimiter
from om_workers.errors import CoordinationError
from om_workers.store import AccountStore

log = logging.getLogger("om_api")

RATE_LIMITED: Final = "rate_limited"
"""The ``error`` code of a 429."""
LEASE_S: Final = 1.0
"""How long a process may spend a lease it took, seconds; what is left then is dropped."""
MAX_LEASES: Final = 4096
"""Leases kept at once (one per busy key and class); past that, expired ones are dropped."""
_FETCH_STRIPES: Final = 64
UNCHECKED_S: Final = 1.0
"""After Redis failed to answer a limit check, how long requests pass unchecked (counted as
such) before the next one asks again, seconds."""


class RateLimitedError(ApiError):
    """429: the key spent its budget of ``request_class``; retry after ``retry_after_s``."""

    def __init__(self, request_class: RequestClass, limit: RateLimit, retry_after_s: int) -> None:
        super().__init__(
            429,
            RATE_LIMITED,
            f"rate limit of {request_class} exceeded: {limit.rate_per_s:g}/s, burst "
            f"{limit.burst} per API key; retry after {retry_after_s} s",
            headers={"Retry-After": str(retry_after_s)},
        )
        self.request_class = request_class
        self.limit = limit
        self.retry_after_s = retry_after_s


def request_class(method: str, route_template: str) -> RequestClass:
    """The class a request spends: ``POST .../entries`` and ``POST .../import`` appends,
    ``POST .../flush`` flushes, anything else reads."""
    if method == "POST" and route_template.endswith(("/entries", "/messages", "/import")):
        return "appends"
    if method == "POST" and route_template.endswith("/flush"):
        return "flushes"
    return "reads"


def default_limits(settings: Settings) -> dict[RequestClass, RateLimit]:
    """The ``OM_RATE_*`` limits of every class."""
    rates = settings.rate_limits
    return {
        "appends": RateLimit(rates.appends_per_s, rates.appends_burst),
        "flushes": RateLimit(rates.flushes_per_s, rates.flushes_burst),
        "reads": RateLimit(rates.reads_per_s, rates.reads_burst),
    }


def limits_out(
    tenant_id: str,
    overrides: dict[RequestClass, RateLimit],
    defaults: dict[RequestClass, RateLimit],
) -> RateLimitsOut:
    """The answer of both limits routes and of ``om tenants limits --json``: the tenant's
    ``overrides`` and, for every class, the override else the ``defaults`` entry."""

    def out(limit: RateLimit) -> RateLimitOut:
        return RateLimitOut(rate_per_s=limit.rate_per_s, burst=limit.burst)

    effective = {**defaults, **overrides}
    return RateLimitsOut(
        tenant_id=tenant_id,
        overrides={name: out(limit) for name, limit in overrides.items()},
        effective={name: out(effective[name]) for name in REQUEST_CLASSES},
    )


@dataclass
class _Lease:
    """Requests of one key's class taken from its bucket and not spent yet."""

    limit: RateLimit
    left: int
    until: float


class ApiRateLimits:
    """The limits of one API process: defaults, cached per-tenant overrides, the Redis limiter
    and the leases taken from it."""

    def __init__(
        self, settings: Settings, accounts: AccountStore, limiter: RateLimiter, metrics: ApiMetrics
    ) -> None:
        self.enabled = settings.rate_limits.enabled
        self.defaults = default_limits(settings)
        self._cache_s = settings.rate_limits.cache_s
        self._accounts = accounts
        self._limiter = limiter
        self._metrics = metrics
        self._cache: dict[str, tuple[float, dict[RequestClass, RateLimit]]] = {}
        self._leases: dict[tuple[str, RequestClass], _Lease] = {}
        self._lock = threading.Lock()
        # One fetch of a key's lease at a time: the requests that find it spent while it is
        # being fetched wait and spend from it, rather than each taking a lease of its own (a
        # burst of them would empty the shared bucket into this process).
        self._fetching = [threading.Lock() for _ in range(_FETCH_STRIPES)]
        self._unchecked_until = 0.0

    def effective(self, tenant_id: str) -> dict[RequestClass, RateLimit]:
        """The tenant's limits: its overrides over the defaults (cached ``OM_RATE_LIMIT_CACHE_S``).

        Raises :class:`~om_workers.errors.TenantNotFoundError` and store errors.
        """
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(tenant_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        limits = {**self.defaults, **self._accounts.get_rate_limits(tenant_id)}
        if self._cache_s > 0:
            with self._lock:
                self._cache[tenant_id] = (now + self._cache_s, limits)
        return limits

    def forget(self, tenant_id: str) -> None:
        """Drop the cached overrides of a tenant (this process changed them)."""
        with self._lock:
            self._cache.pop(tenant_id, None)

    def spend_leased(self, tenant_id: str, key_id: str, spent: RequestClass) -> bool:
        """Spend one request of the key's ``spent`` budget from this process's lease, with no
        I/O: True when it was spent (or limits are off, or Redis failed just before: the
        request passes unchecked and is counted), False when :meth:`check` must ask."""
        if not self.enabled:
            return True
        now = time.monotonic()
        if now < self._unchecked_until:
            self._metrics.observe_rate_limit_unavailable()
            return True
        with self._lock:
            cached = self._cache.get(tenant_id)
            lease = self._leases.get((key_id, spent))
            if cached is None or cached[0] <= now or lease is None:
                return False
            if lease.left < 1 or lease.until <= now or lease.limit != cached[1][spent]:
                return False
            lease.left -= 1
            return True

    def check(self, tenant_id: str, key_id: str, spent: RequestClass) -> None:
        """Spend one request of the key's ``spent`` budget: from the lease, else from Redis
        (taking a new lease). Blocking.

        Raises :class:`RateLimitedError` (a 429) over the limit. Redis unreachable or failing:
        returns (fail open), logs a warning and counts ``om_api_rate_limit_unavailable``.
        """
        if self.spend_leased(tenant_id, key_id, spent):
            return
        with self._fetching[hash((key_id, spent)) % _FETCH_STRIPES]:
            if self.spend_leased(tenant_id, key_id, spent):
                return  # another request fetched a lease meanwhile
            self._spend_from_redis(tenant_id, key_id, spent)

    def _spend_from_redis(self, tenant_id: str, key_id: str, spent: RequestClass) -> None:
        limit = self.effective(tenant_id)[spent]
        try:
            decision = self._limiter.acquire(
                key_id, spent, limit, tenant_id=tenant_id, wanted=lease_size(limit)
            )
        except CoordinationError as exc:
            self._metrics.observe_rate_limit_unavailable()
            log.warning(
                "rate limit not checked: Redis unavailable; request allowed",
                extra={"error_type": type(exc).__name__, "request_class": spent},
            )
            # The next requests pass unchecked for a while, rather than each waiting on a Redis
            # that does not answer (one fetch at a time per key: they would queue).
            with self._lock:
                self._unchecked_until = time.monotonic() + UNCHECKED_S
            return
        if not decision.allowed:
            self._metrics.observe_rate_limited(spent)
            raise RateLimitedError(spent, limit, retry_after_header_s(decision.retry_after_us))
        if decision.granted > 1:
            self._keep_lease(key_id, spent, _Lease(limit, decision.granted - 1, 0.0))

    def _keep_lease(self, key_id: str, spent: RequestClass, lease: _Lease) -> None:
        now = time.monotonic()
        lease.until = now + LEASE_S
        with self._lock:
            if len(self._leases) >= MAX_LEASES:
                self._leases = {k: v for k, v in self._leases.items() if v.until > now}
                if len(self._leases) >= MAX_LEASES:
                    self._leases.clear()
            self._leases[(key_id, spent)] = lease
