"""Lock, retry and delivery timing as pure functions: no clock, no randomness of their own.

Time and randomness come in as arguments (``now_s`` from :func:`time.monotonic`, ``random`` a
callable returning floats in ``[0, 1)``), so every rule here is tested with plain tables.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Final

from om_core.policy.backoff import RetryPolicy, backoff_delay_s

HEARTBEAT_DIVISOR = 3
"""The heartbeat extends the lock every ``ttl / 3``: two extensions can fail (a Redis hiccup, a
GC pause) before the lock expires."""


def heartbeat_interval_s(ttl_s: float) -> float:
    """Seconds between lock extensions for a lock of ``ttl_s`` seconds (``ttl_s / 3``).

    Raises ``ValueError`` when ``ttl_s`` is not a positive finite number.
    """
    _require_positive("ttl_s", ttl_s)
    return ttl_s / HEARTBEAT_DIVISOR


def ttl_ms(ttl_s: float) -> int:
    """A TTL in whole milliseconds for ``PX``/``PEXPIRE``, rounded up so it is never 0.

    Raises ``ValueError`` when ``ttl_s`` is not a positive finite number.
    """
    _require_positive("ttl_s", ttl_s)
    return max(1, math.ceil(ttl_s * 1000))


def lock_valid_until_s(extended_at_s: float, ttl_s: float) -> float:
    """The moment (same clock as ``extended_at_s``) after which a lock must be presumed lost.

    ``extended_at_s`` is read *before* sending the SET or extend command that succeeded: Redis
    starts the TTL when it runs the command, which is no earlier, so this bound is safe.
    Raises ``ValueError`` when ``ttl_s`` is not a positive finite number.
    """
    _require_positive("ttl_s", ttl_s)
    return extended_at_s + ttl_s


REDIS_RETRY_POLICY: Final = RetryPolicy(base_s=0.5, cap_s=2.0, multiplier=2.0, jitter=0.0)
"""The pace of a Redis step retried in the background until Redis answers again (a lock
release, a fair-queue place): 0.5 s doubling to at most 2 s, so the step lands within about
two seconds of Redis's return. Only the backoff fields apply."""


def redis_retry_delay_s(retry: int) -> float:
    """Seconds before background retry number ``retry`` (1-based) of a Redis step:
    :data:`REDIS_RETRY_POLICY`'s exponential, no jitter (one process retries its own steps).
    Raises ``ValueError`` for ``retry < 1``."""
    if retry < 1:
        raise ValueError(f"retry is 1-based, got {retry}")
    return backoff_delay_s(retry, REDIS_RETRY_POLICY, draw=0.0)


def redis_retry_deadline_s(lock_ttl_s: float) -> float:
    """How long a background Redis step keeps being retried, seconds: two lock TTLs, the age at
    which the reconciler re-publishes an unlocked ``pending`` marker anyway (after that a retry
    adds nothing the reconciler does not do). Raises ``ValueError`` unless ``lock_ttl_s`` is a
    positive finite number."""
    _require_positive("lock_ttl_s", lock_ttl_s)
    return 2 * lock_ttl_s


RECONCILE_SOON_WINDOW_S = 10.0
"""Processes that ask for an early reconciler pass within this many seconds of each other
(every worker reconnecting to a broker that came back, say) get one pass between them."""


def lost_run_watch_interval_s(liveness_ttl_s: float) -> float:
    """Seconds between two looks for runs whose worker died (one look for the whole cluster):
    half the liveness TTL, so a killed worker's run is found at most that long after its
    liveness key expired, instead of at the reconciler's next pass. Raises ``ValueError``
    unless ``liveness_ttl_s`` is a positive finite number."""
    _require_positive("liveness_ttl_s", liveness_ttl_s)
    return liveness_ttl_s / 2


FAILURE_BACKOFF_AFTER = 3
"""Consecutive failed jobs of a session after which automatic re-requests back off."""

FAILURE_BACKOFF_POLICY: Final = RetryPolicy(base_s=60.0, cap_s=3600.0, multiplier=2.0, jitter=0.0)
"""The reconciler's schedule: 60 s doubling per further failure, at most an hour, no jitter
(one reconciler decides; there is no crowd to spread). Only the backoff fields apply."""


def failure_backoff_s(
    consecutive_failures: int,
    *,
    base_s: float,
    cap_s: float,
    after: int = FAILURE_BACKOFF_AFTER,
) -> float:
    """Seconds the reconciler waits, after a session's last failed job, before requesting it
    again: 0 below ``after`` consecutive failures, then ``base_s`` doubling per further failure,
    at most ``cap_s``. A session whose provider keeps failing so stops spending every reconcile
    pass.

    The same exponential as every other retry (:func:`om_core.policy.backoff.backoff_delay_s` with
    :data:`FAILURE_BACKOFF_POLICY`'s shape): failure number ``after`` is its first retry.
    Raises ``ValueError`` for a negative count or a non-positive ``base_s``/``cap_s``/``after``.
    """
    if consecutive_failures < 0 or after < 1:
        raise ValueError("consecutive_failures must be >= 0 and after >= 1")
    _require_positive("base_s", base_s)
    _require_positive("cap_s", cap_s)
    if consecutive_failures < after:
        return 0.0
    policy = replace(FAILURE_BACKOFF_POLICY, base_s=base_s, cap_s=cap_s)
    return backoff_delay_s(consecutive_failures - after + 1, policy, draw=0.0)


def redelivery_exhausted(deliveries: int, *, max_deliveries: int) -> bool:
    """True when a job started ``deliveries`` times (this attempt included) must not run.

    A message that keeps killing its worker (a poison message) would otherwise be redelivered
    forever; after ``max_deliveries`` attempts the task records the job as failed and acks it.
    Raises ``ValueError`` when ``deliveries < 1`` or ``max_deliveries < 1``.
    """
    if deliveries < 1 or max_deliveries < 1:
        raise ValueError(
            f"deliveries and max_deliveries must be >= 1, got {deliveries}, {max_deliveries}"
        )
    return deliveries > max_deliveries


@dataclass(frozen=True)
class TimeLimits:
    """The four timeouts of one flush, seconds, in the order they must fire.

    ``http_timeout_s`` < ``soft_time_limit_s`` < ``hard_time_limit_s`` < ``visibility_timeout_s``:
    a hung provider call times out before Celery's soft limit interrupts the task, the soft limit
    lets the task record its failure before the hard limit kills it, and Redis redelivers an
    unacked message only after the hard limit, counted from delivery, has certainly passed.
    """

    http_timeout_s: float
    soft_time_limit_s: float
    hard_time_limit_s: float
    visibility_timeout_s: float


def derive_time_limits(
    *, http_timeout_s: float, max_attempts: int, backoff_cap_s: float, queue_wait_s: float
) -> TimeLimits:
    """Time limits for a flush job of three workers' provider calls, each retried up to
    ``max_attempts`` times (every call at most ``http_timeout_s``, every wait at most
    ``backoff_cap_s``), plus ``queue_wait_s`` of prefetch wait before the task starts.

    The soft limit covers one worker's full retry chain times three (observer, reflector,
    dropper) plus 10 % slack; the hard limit adds a grace of 30 s (or 10 % if larger) to record
    the failure; the visibility timeout adds the queue wait and the same grace, because Redis
    counts it from delivery (celery #5935). Raises ``ValueError`` for non-positive inputs.
    """
    _require_positive("http_timeout_s", http_timeout_s)
    _require_positive("backoff_cap_s", backoff_cap_s)
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    if queue_wait_s < 0 or not math.isfinite(queue_wait_s):
        raise ValueError(f"queue_wait_s must be a non-negative number, got {queue_wait_s}")
    chain = max_attempts * http_timeout_s + (max_attempts - 1) * backoff_cap_s
    soft = 3 * chain * 1.1
    hard = soft + _grace_s(soft)
    visibility = hard + queue_wait_s + _grace_s(soft)
    limits = TimeLimits(http_timeout_s, soft, hard, visibility)
    check_time_limits(limits)
    return limits


def _grace_s(soft_time_limit_s: float) -> float:
    """Time to record a failure after the soft limit: 30 s, or 10 % of the soft limit."""
    return max(30.0, soft_time_limit_s * 0.1)


def resolve_time_limits(
    *,
    http_timeout_s: float,
    max_attempts: int,
    backoff_cap_s: float,
    queue_wait_s: float,
    soft_time_limit_s: float | None,
    hard_time_limit_s: float | None,
    visibility_timeout_s: float | None,
    visibility_applies: bool = True,
) -> TimeLimits:
    """The flush time limits from the given overrides, deriving what is not given.

    - The soft and hard limits are set together or not at all; unset, both are derived from
      the provider settings exactly as with no override (:func:`derive_time_limits`).
    - The visibility timeout, unset, is derived from the hard limit in force: it plus
      ``queue_wait_s`` plus the same grace as the derivation (so a visibility timeout set
      alone keeps the derived limits, checked against it).

    ``visibility_applies`` is false for a broker without a visibility timeout (RabbitMQ): the
    order is then checked for HTTP timeout < soft < hard only. Raises ``ValueError`` when one
    of the pair is set alone, a value is not positive, or the order does not hold (the message
    names the first pair out of order).
    """
    soft, hard = soft_time_limit_s, hard_time_limit_s
    if (soft is None) != (hard is None):
        given, missing = (
            ("OM_SOFT_TIME_LIMIT_S", "OM_HARD_TIME_LIMIT_S")
            if soft is not None
            else ("OM_HARD_TIME_LIMIT_S", "OM_SOFT_TIME_LIMIT_S")
        )
        raise ValueError(
            f"{given} is set without {missing}: set both, or neither (then both are derived "
            "from the provider settings)"
        )
    if soft is None or hard is None:
        derived = derive_time_limits(
            http_timeout_s=http_timeout_s,
            max_attempts=max_attempts,
            backoff_cap_s=backoff_cap_s,
            queue_wait_s=queue_wait_s,
        )
        soft, hard = derived.soft_time_limit_s, derived.hard_time_limit_s
    if queue_wait_s < 0 or not math.isfinite(queue_wait_s):
        raise ValueError(f"queue_wait_s must be a non-negative number, got {queue_wait_s}")
    visibility = visibility_timeout_s
    if visibility is None:
        visibility = hard + queue_wait_s + _grace_s(soft)
    limits = TimeLimits(http_timeout_s, soft, hard, visibility)
    check_time_limits(limits, visibility_applies=visibility_applies)
    return limits


def check_time_limits(limits: TimeLimits, *, visibility_applies: bool = True) -> None:
    """Raise ``ValueError`` naming the first pair of timeouts that is out of order
    (``visibility_applies=False``: the visibility timeout is not checked)."""
    order = (
        ("http_timeout_s", limits.http_timeout_s),
        ("soft_time_limit_s", limits.soft_time_limit_s),
        ("hard_time_limit_s", limits.hard_time_limit_s),
        ("visibility_timeout_s", limits.visibility_timeout_s),
    )[: 4 if visibility_applies else 3]
    for name, value in order:
        _require_positive(name, value)
    for (lo_name, lo), (hi_name, hi) in itertools.pairwise(order):
        if not lo < hi:
            raise ValueError(f"{lo_name} ({lo}) must be below {hi_name} ({hi})")


def _require_positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value}")
