"""How long a flush may run and when the reconciler calls it lost: the time limits and ages
derived from the ``OM_*`` settings and the broker they select.

HTTP timeout < soft time limit < hard time limit < visibility timeout (Redis broker), each
derived from the provider's retry settings unless all are overridden (see
:mod:`om_workers.coordination.timing` for the pure rules).
"""

from __future__ import annotations

import math

from om_core.settings import resolve_settings
from om_workers.celery.config import Broker, broker_kind
from om_workers.config import Settings
from om_workers.coordination.timing import TimeLimits, resolve_time_limits
from om_workers.errors import ConfigError


def time_limits(settings: Settings) -> TimeLimits:
    """The flush time limits (seconds): the ``OM_SOFT_TIME_LIMIT_S``/``OM_HARD_TIME_LIMIT_S``
    pair and ``OM_VISIBILITY_TIMEOUT_S`` where set, the rest derived from the provider retry
    settings (:func:`~om_workers.coordination.timing.resolve_time_limits`).

    With a RabbitMQ broker (``OM_BROKER_URL=amqp://...``) there is no visibility timeout (the
    value only sets the reconciler's stuck-job age), so neither the visibility ordering nor
    the lock TTL bound below apply.

    Raises :class:`ConfigError` when one of the two time limits is set alone, they are out of
    order, the lock TTL is not below the visibility timeout (Redis broker), or
    ``OM_BROKER_URL`` has an unsupported scheme.
    """
    broker = broker_of(settings)
    try:
        limits = resolve_time_limits(
            http_timeout_s=settings.llm.http_timeout_s,
            max_attempts=settings.llm.max_attempts,
            backoff_cap_s=settings.llm.backoff_cap_s,
            queue_wait_s=settings.delivery.queue_wait_s,
            soft_time_limit_s=settings.delivery.soft_time_limit_s,
            hard_time_limit_s=settings.delivery.hard_time_limit_s,
            visibility_timeout_s=settings.delivery.visibility_timeout_s,
            visibility_applies=broker == "redis",
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if broker == "redis" and settings.locks.ttl_s >= limits.visibility_timeout_s:
        # A crashed job's redelivered message must find the dead worker's lock expired.
        raise ConfigError("OM_LOCK_TTL_S must be below the visibility timeout")
    return limits


def broker_of(settings: Settings) -> Broker:
    """Which broker the settings select: ``OM_BROKER_URL``'s scheme, else Redis.

    Raises :class:`ConfigError` for an unsupported scheme (the message never quotes the URL).
    """
    if not settings.redis.broker_url:
        return "redis"
    try:
        return broker_kind(settings.redis.broker_url)
    except ValueError as exc:
        raise ConfigError(f"OM_BROKER_URL: {exc}") from exc


def broker_url(settings: Settings) -> str:
    """The Celery broker URL: ``OM_BROKER_URL`` when set, else ``OM_REDIS_URL``.

    Raises :class:`ConfigError` when ``OM_REDIS_URL`` is unset (the locks and coalescing
    markers live there whatever the broker) or ``OM_BROKER_URL`` has an unsupported scheme.
    """
    if not settings.redis.url:
        raise ConfigError(
            "OM_REDIS_URL must be set for Celery workers and publishers (locks and coalescing, "
            "and the broker unless OM_BROKER_URL is set)"
        )
    broker_of(settings)
    return settings.redis.broker_url or settings.redis.url


def stale_pending_age_s(settings: Settings) -> float:
    """Age in seconds after which an unlocked ``pending`` marker is re-published: two lock TTLs,
    so a crashed holder's lock has surely expired and the marker's own message had its turn."""
    return 2 * settings.locks.ttl_s


def stuck_job_age_s(settings: Settings) -> float:
    """Age in seconds after which a ``running`` job is swept as failed: past the visibility
    timeout plus a lock TTL, so Redis redelivered its message and the second attempt had its
    chance (on RabbitMQ, which redelivers at once, never below the hard time limit plus a lock
    TTL)."""
    limits = time_limits(settings)
    return max(limits.visibility_timeout_s, limits.hard_time_limit_s) + settings.locks.ttl_s


def busy_retry_limit(settings: Settings) -> int:
    """Retries of a message past a held lock: enough lock TTLs to outlast the longest flush job
    (``ceil(hard time limit / lock TTL) + 1``). Passed to Celery as ``max_retries`` too (its
    ``None`` means the task's default of 3, not unlimited). Raises like :func:`time_limits`."""
    return math.ceil(time_limits(settings).hard_time_limit_s / settings.locks.ttl_s) + 1


def unobserved_threshold(settings: Settings) -> int:
    """Unobserved tokens from which the reconciler requests a flush: the observer's own
    ``observation.messageTokens`` from ``OM_SETTINGS_JSON`` (below it a flush observes
    nothing). Raises ``pydantic.ValidationError`` for invalid memory settings."""
    return resolve_settings(dict(settings.memory_settings)).observation.message_tokens


__all__ = [
    "broker_of",
    "broker_url",
    "busy_retry_limit",
    "stale_pending_age_s",
    "stuck_job_age_s",
    "time_limits",
    "unobserved_threshold",
]
