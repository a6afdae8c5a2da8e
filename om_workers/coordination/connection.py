"""The Redis client every ``om_workers`` coordination module uses, and its error translation.

redis-py errors never leave ``om_workers``: every call into Redis runs inside
:func:`translate_errors`, which re-raises them as :class:`om_workers.errors.CoordinationError`
or its subclass :class:`om_workers.errors.RedisUnavailableError`.

The client retries a command three times with jittered exponential backoff on connection errors
and timeouts, which is what carries it across a Redis restart. A retried command may have run
once already (its reply was lost); each script in :mod:`om_workers.coordination.keys` is written so
that a repeat is harmless or detected, and the modules that call them say how.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from om_workers.errors import CoordinationError, RedisUnavailableError

SOCKET_TIMEOUT_S: Final = 5.0
"""Read/write timeout per command, seconds: far above a healthy Redis round trip, far below a
lock TTL, so a stalled Redis is noticed before the lock it guards expires."""

CONNECT_TIMEOUT_S: Final = 2.0
"""TCP connect timeout, seconds."""

RETRIES: Final = 3
"""Retries per command on connection errors and timeouts (so four attempts in all)."""

HEALTH_CHECK_INTERVAL_S: Final = 15
"""An idle pooled connection is PINGed before reuse after this many seconds, so a connection
broken by a Redis restart is replaced instead of failing the first command."""

_UNAVAILABLE: Final = (
    redis.exceptions.ConnectionError,  # also BusyLoadingError: a restarting Redis
    redis.exceptions.TimeoutError,
    redis.exceptions.OutOfMemoryError,  # noeviction and full: writes fail until memory frees
    redis.exceptions.ReadOnlyError,  # a replica during failover
)


def connect(
    url: str,
    *,
    socket_timeout_s: float = SOCKET_TIMEOUT_S,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    retries: int = RETRIES,
) -> redis.Redis:
    """A client for ``url`` (``redis://host:port/db``) that decodes replies to ``str``.

    No connection is made until the first command. Raises :class:`CoordinationError` when the
    URL cannot be parsed.
    """
    try:
        return redis.Redis.from_url(
            url,
            decode_responses=True,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=connect_timeout_s,
            health_check_interval=HEALTH_CHECK_INTERVAL_S,
            retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries),
            retry_on_error=[redis.exceptions.ConnectionError, redis.exceptions.TimeoutError],
        )
    except ValueError as exc:
        raise CoordinationError(f"invalid Redis URL: {exc}") from exc


@contextmanager
def translate_errors(action: str) -> Iterator[None]:
    """Run the block, re-raising redis-py errors as this package's errors.

    ``action`` names what was being done (for the message). Unreachable, timed-out, loading,
    read-only or full Redis raise :class:`RedisUnavailableError` (retry later); any other Redis
    error raises :class:`CoordinationError`. Other exceptions pass through untouched.
    """
    try:
        yield
    except _UNAVAILABLE as exc:
        raise RedisUnavailableError(f"Redis unavailable while {action}: {exc}") from exc
    except redis.exceptions.RedisError as exc:
        raise CoordinationError(f"Redis error while {action}: {exc}") from exc


def is_available(client: redis.Redis) -> bool:
    """True when Redis answers PING (readiness checks); never raises for Redis errors."""
    try:
        return bool(client.ping())
    except redis.exceptions.RedisError:
        return False
