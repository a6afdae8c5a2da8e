"""Provider retry timing as pure functions: no clock, no randomness, no sleeping of their own.

The adapter passes in the attempt number, a random draw in ``[0, 1)`` and the parsed
``Retry-After``; these functions only compute, so the whole policy is tested with tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a provider call (times in seconds).

    ``max_attempts`` counts every attempt, the first included. The backoff before retry ``n``
    (``n`` = 1 for the first retry) is ``min(max_delay_s, base_delay_s * multiplier**(n-1))``
    reduced by up to ``jitter`` of itself. A ``Retry-After`` answer is honoured exactly, unless
    it asks for more than ``max_retry_after_s``: then retrying is pointless within one task and
    the call gives up.
    """

    max_attempts: int = 4
    base_delay_s: float = 0.5
    multiplier: float = 2.0
    max_delay_s: float = 20.0
    jitter: float = 0.5
    max_retry_after_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        for name in ("base_delay_s", "multiplier", "max_delay_s", "max_retry_after_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite non-negative number")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be within 0..1")


def is_retryable_status(status: int) -> bool:
    """True for statuses worth retrying: 408, 429 and the transient 5xx."""
    return status in RETRYABLE_STATUSES or 500 <= status <= 599


def backoff_delay_s(retry: int, policy: RetryPolicy, draw: float) -> float:
    """Seconds to wait before retry number ``retry`` (1-based), with jitter from ``draw``.

    ``draw`` is a random number in ``[0, 1)``; ``draw=0`` gives the full backoff, draws near 1
    shorten it by up to ``policy.jitter`` of itself. Raises ``ValueError`` for ``retry < 1``
    or a draw outside ``[0, 1)``.
    """
    if retry < 1:
        raise ValueError("retry is 1-based")
    if not 0 <= draw < 1:
        raise ValueError("draw must be in [0, 1)")
    exponent = min(retry - 1, 64)  # beyond this the cap applies anyway; avoids overflow
    full = min(policy.max_delay_s, policy.base_delay_s * policy.multiplier**exponent)
    return full * (1 - policy.jitter * draw)


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


def next_delay_s(
    attempt: int,
    policy: RetryPolicy,
    draw: float,
    *,
    retry_after_s: float | None = None,
) -> float | None:
    """Seconds to wait after failed attempt number ``attempt`` (1-based), or ``None`` to stop.

    Stops when ``attempt`` used the last allowed attempt, or when ``Retry-After`` asks for
    more than ``policy.max_retry_after_s``; otherwise honours ``Retry-After`` exactly, or
    backs off per :func:`backoff_delay_s`.
    """
    if attempt >= policy.max_attempts:
        return None
    if retry_after_s is not None:
        return retry_after_s if retry_after_s <= policy.max_retry_after_s else None
    return backoff_delay_s(attempt, policy, draw)
