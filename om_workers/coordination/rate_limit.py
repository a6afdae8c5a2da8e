"""Per-API-key rate limits in Redis, shared by every API replica.

One bucket per (key, request class) under ``om:rate:{key id}:{class}``
(:func:`om_workers.coordination.keys.rate_key`), checked and updated by one Lua script so that
two replicas can never both spend the last token. The arithmetic is
:func:`om_core.policy.rate_limit.decide`, which the script mirrors; the script reads Redis's clock,
so
replicas with skewed clocks still share one budget.
"""

from __future__ import annotations

from typing import cast

import redis

from om_core.policy.rate_limit import Decision, RateLimit, RequestClass
from om_workers.coordination import keys
from om_workers.coordination.connection import translate_errors


class RateLimiter:
    """Spends one request of an API key's budget per :meth:`acquire`."""

    def __init__(self, client: redis.Redis) -> None:
        self._script = client.register_script(keys.RATE_LIMIT)

    def acquire(
        self,
        key_id: str,
        request_class: RequestClass,
        limit: RateLimit,
        *,
        tenant_id: str = "",
        now_us: int | None = None,
        wanted: int = 1,
    ) -> Decision:
        """Spend one request (or up to ``wanted`` at once: ``granted`` says how many), or say
        how long to wait (``retry_after_us``) when the bucket is empty; a refused request
        spends nothing and counts against ``tenant_id`` in ``om:throttled`` (the per-tenant
        throttled metric). ``now_us`` replaces Redis's clock (tests).

        Raises :class:`~om_workers.errors.RedisUnavailableError` when Redis cannot be reached
        and :class:`~om_workers.errors.CoordinationError` for any other Redis error.
        """
        now = "" if now_us is None else now_us
        args = [limit.interval_us, limit.burst, now, tenant_id, max(1, wanted)]
        with translate_errors("checking a rate limit"):
            key = keys.rate_key(key_id, request_class)
            reply = cast(list[int], self._script(keys=[key, keys.THROTTLED], args=args))
        allowed, retry_after_us, tat_us, ttl_ms, granted = (int(part) for part in reply)
        return Decision(bool(allowed), retry_after_us, tat_us if allowed else None, ttl_ms, granted)
