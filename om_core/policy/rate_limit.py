"""Per-key rate limiting as pure arithmetic: GCRA (the generic cell rate algorithm).

GCRA is a token bucket stored as one number, the *theoretical arrival time* (TAT): the instant
at which the bucket would be full again. A request at ``now`` is allowed when
``TAT - now <= (burst - 1) * interval`` and then moves the TAT one ``interval`` later. So from
idle exactly ``burst`` requests pass at once, and afterwards one per ``interval``.

Times are whole microseconds (integers) so that this function and the Redis script that mirrors
it (``om_workers/coordination/lua/rate_limit.lua``) compute exactly the same answers: Lua
numbers are doubles, exact for integers far beyond any microsecond clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from om_core.errors import InvalidInputError

MICROS_PER_S = 1_000_000

RequestClass = Literal["appends", "flushes", "reads"]
"""What a request spends: appending entries, asking for a flush, or anything else (reads)."""
REQUEST_CLASSES: tuple[RequestClass, ...] = ("appends", "flushes", "reads")


@dataclass(frozen=True)
class RateLimit:
    """``rate_per_s`` requests per second sustained, ``burst`` at once from idle.

    Raises :class:`~om_core.errors.InvalidInputError` for a rate that is not a positive finite
    number, a rate above one per microsecond, or a burst below 1.
    """

    rate_per_s: float
    burst: int

    def __post_init__(self) -> None:
        if not math.isfinite(self.rate_per_s) or self.rate_per_s <= 0:
            raise InvalidInputError("rate_per_s must be a positive number")
        if self.rate_per_s > MICROS_PER_S:
            raise InvalidInputError("rate_per_s must be at most 1,000,000")
        if isinstance(self.burst, bool) or self.burst < 1:
            raise InvalidInputError("burst must be at least 1")

    @property
    def interval_us(self) -> int:
        """Microseconds between two requests at the sustained rate (at least 1)."""
        return max(1, round(MICROS_PER_S / self.rate_per_s))


@dataclass(frozen=True)
class Decision:
    """One request's verdict. ``tat_us`` is the TAT to store (``None``: store nothing, the
    request was refused); ``ttl_ms`` how long the stored TAT matters (after it the bucket is
    full again and the key may expire); ``retry_after_us`` how long a refused caller must wait;
    ``granted`` how many requests the verdict admits (0 when refused; more than one when a
    caller asked for a lease of several, see :func:`lease_size`)."""

    allowed: bool
    retry_after_us: int
    tat_us: int | None
    ttl_ms: int
    granted: int = 1


def decide(
    stored_tat_us: int | None, now_us: int, interval_us: int, burst: int, wanted: int = 1
) -> Decision:
    """GCRA for ``wanted`` requests at ``now_us`` given the stored TAT (``None``: no key, full
    bucket): as many of them as would pass one after another, at least one, else a refusal.

    A TAT in the past counts as ``now`` (the bucket cannot hold more than ``burst``).
    """
    tau = interval_us * (burst - 1)
    tat = now_us if stored_tat_us is None or stored_tat_us < now_us else stored_tat_us
    if tat - now_us > tau:
        return Decision(False, tat - tau - now_us, None, 0, granted=0)
    granted = min(max(1, wanted), (tau - (tat - now_us)) // interval_us + 1)
    new_tat = tat + granted * interval_us
    return Decision(True, 0, new_tat, -(-(new_tat - now_us) // 1000), granted=granted)


LEASE_SHARE = 20
"""A lease holds at most a twentieth of the burst, and of a second's worth at the rate."""


def lease_size(limit: RateLimit) -> int:
    """How many requests an API process takes from a key's shared bucket at once, to spend
    without asking Redis again: a twentieth of the burst or of a second at the sustained rate,
    whichever is smaller, at least one (one: every request asks, the exact limit)."""
    return max(1, min(limit.burst // LEASE_SHARE, int(limit.rate_per_s) // LEASE_SHARE))


def retry_after_header_s(retry_after_us: int) -> int:
    """``Retry-After`` in whole seconds: rounded up (an earlier retry would be refused again),
    at least 1 (``0`` would invite an immediate retry storm)."""
    return max(1, -(-retry_after_us // MICROS_PER_S))
