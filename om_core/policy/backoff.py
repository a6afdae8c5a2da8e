"""Retry and backoff timing as pure functions: no clock, no randomness, no sleeping of their own.

One :class:`RetryPolicy` and one backoff formula serve every retry loop of the system: the
HTTP client's retries (:mod:`om_api.client`), the provider adapters' retries
(:mod:`om_workers.providers.http`) and the reconciler's wait after repeated failed jobs
(:func:`om_workers.coordination.timing.failure_backoff_s`). Each caller passes the attempt number,
a random draw in ``[0, 1)`` and the parsed ``Retry-After``; these functions only compute, so the
whole policy is tested with tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from om_core.errors import InvalidInputError


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry (times in seconds).

    ``attempts`` counts every attempt, the first included. The backoff before retry ``n``
    (``n`` = 1 for the first retry) is ``min(cap_s, base_s * multiplier**(n-1))`` shortened by
    up to ``jitter`` of itself (``jitter=1``: "full jitter", uniform in ``[0, full]``, so a
    crowd of callers does not return in step; ``jitter=0``: exact).

    A ``Retry-After`` answer replaces the backoff: it is lengthened by up to
    ``retry_after_jitter`` of itself. One longer than ``max_retry_after_s`` either waits
    ``max_retry_after_s`` or, with ``give_up_on_long_retry_after``, stops retrying (for a caller
    whose time is bounded, where waiting that long is pointless).

    The defaults are the HTTP client's (:class:`om_api.client.OMClient`); the provider
    adapters use :data:`om_workers.providers.retry.PROVIDER_RETRY_POLICY`. Raises
    :class:`~om_core.errors.InvalidInputError` (a ``ValueError``) for out-of-range values.
    """

    attempts: int = 5
    base_s: float = 0.25
    cap_s: float = 8.0
    multiplier: float = 2.0
    jitter: float = 1.0
    max_retry_after_s: float = 30.0
    retry_after_jitter: float = 0.1
    give_up_on_long_retry_after: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or self.attempts < 1:
            raise InvalidInputError("attempts must be at least 1")
        for name in ("base_s", "cap_s", "multiplier", "max_retry_after_s", "retry_after_jitter"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise InvalidInputError(f"{name} must be a finite non-negative number")
        if not 0 <= self.jitter <= 1:
            raise InvalidInputError("jitter must be within 0..1")


def backoff_delay_s(retry: int, policy: RetryPolicy, draw: float) -> float:
    """Seconds to wait before retry number ``retry`` (1-based), with jitter from ``draw``.

    ``min(policy.cap_s, policy.base_s * policy.multiplier**(retry-1))``, times
    ``1 - policy.jitter * draw``: ``draw=0`` gives the full backoff, draws near 1 shorten it by
    up to ``policy.jitter`` of itself. ``draw`` is a random number in ``[0, 1)`` (pass ``0.0``
    for no jitter). Raises :class:`~om_core.errors.InvalidInputError` for ``retry < 1`` or a
    draw outside ``[0, 1)``.
    """
    if retry < 1:
        raise InvalidInputError("retry is 1-based")
    _check_draw(draw)
    try:
        grown = policy.base_s * policy.multiplier ** (retry - 1)
    except OverflowError:  # multiplier**(retry-1) is far past any cap
        grown = math.inf if policy.base_s > 0 else 0.0
    return min(policy.cap_s, grown) * (1 - policy.jitter * draw)


def next_delay_s(
    attempt: int,
    policy: RetryPolicy,
    draw: float,
    *,
    retry_after_s: float | None = None,
) -> float | None:
    """Seconds to wait after failed attempt number ``attempt`` (1-based), or ``None`` to stop.

    Stops when ``attempt`` used the last of ``policy.attempts``. With a ``Retry-After`` of
    ``retry_after_s`` seconds, waits that long (at most ``policy.max_retry_after_s``, or stops
    when it asks for more and ``policy.give_up_on_long_retry_after``), lengthened by
    ``policy.retry_after_jitter * draw`` of itself; otherwise backs off per
    :func:`backoff_delay_s`. Raises :class:`~om_core.errors.InvalidInputError` for
    ``attempt < 1`` or a draw outside ``[0, 1)``.
    """
    if attempt < 1:
        raise InvalidInputError("attempt is 1-based")
    _check_draw(draw)
    if attempt >= policy.attempts:
        return None
    if retry_after_s is None:
        return backoff_delay_s(attempt, policy, draw)
    wait = max(0.0, retry_after_s)
    if wait > policy.max_retry_after_s:
        if policy.give_up_on_long_retry_after:
            return None
        wait = policy.max_retry_after_s
    return wait * (1 + policy.retry_after_jitter * draw)


def parse_retry_after(value: str | None, now_epoch_s: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for: delta-seconds, or an HTTP date relative to
    ``now_epoch_s``. ``None`` for a missing or unreadable header (the backoff applies)."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if math.isfinite(seconds):
        return max(0.0, seconds)
    if now_epoch_s is None:
        return None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now_epoch_s)


def _check_draw(draw: float) -> None:
    if not 0 <= draw < 1:
        raise InvalidInputError("draw must be in [0, 1)")
