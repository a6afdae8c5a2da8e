"""The one backoff rule of every retry loop, as tables: attempts, draws and Retry-After values."""

from __future__ import annotations

import math
from typing import Any

import pytest

from om_core.errors import InvalidInputError
from om_core.policy.backoff import RetryPolicy, backoff_delay_s, next_delay_s, parse_retry_after

# Half jitter, give up on a long Retry-After: the provider adapters' shape.
GIVE_UP = RetryPolicy(
    attempts=5,
    base_s=1.0,
    cap_s=5.0,
    jitter=0.5,
    max_retry_after_s=60.0,
    retry_after_jitter=0.0,
    give_up_on_long_retry_after=True,
)
# The defaults: the HTTP client's full jitter, a long Retry-After capped plus up to 10 %.
CLIENT = RetryPolicy()
# No jitter, 60 s doubling to an hour: the reconciler's schedule.
RECONCILER = RetryPolicy(base_s=60.0, cap_s=3600.0, jitter=0.0)


@pytest.mark.parametrize(
    ("policy", "retry", "draw", "expected"),
    [
        (GIVE_UP, 1, 0.0, 1.0),
        (GIVE_UP, 2, 0.0, 2.0),
        (GIVE_UP, 3, 0.0, 4.0),
        (GIVE_UP, 4, 0.0, 5.0),  # capped
        (GIVE_UP, 200, 0.0, 5.0),  # no overflow far out
        (GIVE_UP, 10**6, 0.0, 5.0),  # multiplier**n overflows a float: still the cap
        (GIVE_UP, 1, 0.5, 0.75),  # jitter shortens by up to half
        (GIVE_UP, 3, 0.5, 3.0),
        (GIVE_UP, 2, 0.999, 2.0 * (1 - 0.5 * 0.999)),
        (CLIENT, 1, 0.0, 0.25),  # full jitter: anywhere in (0, full]
        (CLIENT, 1, 0.5, 0.125),
        (CLIENT, 3, 0.0, 1.0),
        (CLIENT, 6, 0.0, 8.0),  # 0.25 * 2**5 = 8: the cap exactly
        (CLIENT, 7, 0.75, 2.0),  # capped at 8, then jittered
        (CLIENT, 2, 0.999, 0.5 * (1 - 0.999)),
        (RECONCILER, 1, 0.0, 60.0),
        (RECONCILER, 2, 0.0, 120.0),
        (RECONCILER, 6, 0.0, 1920.0),
        (RECONCILER, 7, 0.0, 3600.0),
        (RECONCILER, 7, 0.9, 3600.0),  # jitter 0: the draw does not matter
        (RetryPolicy(base_s=0.1, cap_s=1.0, multiplier=1.5, jitter=0.0), 3, 0.0, 0.225),
        (RetryPolicy(base_s=2.0, cap_s=10.0, multiplier=1.0, jitter=0.0), 50, 0.0, 2.0),
        (RetryPolicy(base_s=0.0, cap_s=10.0, jitter=0.0), 10**6, 0.0, 0.0),
        (RetryPolicy(base_s=5.0, cap_s=0.0), 1, 0.0, 0.0),
    ],
)
def test_backoff_table(policy: RetryPolicy, retry: int, draw: float, expected: float) -> None:
    assert backoff_delay_s(retry, policy, draw) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("policy", "attempt", "draw", "retry_after", "expected"),
    [
        (GIVE_UP, 1, 0.0, None, 1.0),
        (GIVE_UP, 4, 0.0, None, 5.0),
        (GIVE_UP, 5, 0.0, None, None),  # last attempt used
        (GIVE_UP, 6, 0.0, None, None),
        (GIVE_UP, 1, 0.0, 3.0, 3.0),  # Retry-After honoured exactly
        (GIVE_UP, 1, 0.9, 3.0, 3.0),  # no Retry-After jitter
        (GIVE_UP, 1, 0.0, 0.0, 0.0),
        (GIVE_UP, 1, 0.0, 60.0, 60.0),
        (GIVE_UP, 1, 0.0, 61.0, None),  # asks for too long: give up
        (GIVE_UP, 5, 0.0, 1.0, None),
        (CLIENT, 1, 0.0, None, 0.25),
        (CLIENT, 4, 0.5, None, 1.0),
        (CLIENT, 5, 0.0, None, None),  # five attempts by default
        (CLIENT, 1, 0.0, 2.0, 2.0),
        (CLIENT, 1, 0.5, 2.0, 2.1),  # plus up to 10 %
        (CLIENT, 1, 0.0, 31.0, 30.0),  # too long: waits the maximum
        (CLIENT, 1, 0.5, 100.0, 31.5),
        (CLIENT, 1, 0.5, -3.0, 0.0),
        (CLIENT, 5, 0.0, 2.0, None),
        (RetryPolicy(attempts=1), 1, 0.0, None, None),  # a single attempt never retries
    ],
)
def test_next_delay_table(
    policy: RetryPolicy,
    attempt: int,
    draw: float,
    retry_after: float | None,
    expected: float | None,
) -> None:
    got = next_delay_s(attempt, policy, draw, retry_after_s=retry_after)
    assert got == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize(
    ("header", "now", "expected"),
    [
        (None, None, None),
        ("2", None, 2.0),
        (" 1.5 ", None, 1.5),
        ("-4", None, 0.0),
        ("soon", 0.0, None),
        ("", 0.0, None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470.0, 10.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 1445412490.0, 0.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None, None),
        ("nan", None, None),
        ("inf", None, None),
    ],
)
def test_parse_retry_after(header: str | None, now: float | None, expected: float | None) -> None:
    assert parse_retry_after(header, now) == expected


@pytest.mark.parametrize(
    "fields",
    [
        {"attempts": 0},
        {"attempts": True},
        {"jitter": 1.5},
        {"jitter": -0.1},
        {"base_s": math.inf},
        {"base_s": -1.0},
        {"cap_s": math.nan},
        {"multiplier": -2.0},
        {"max_retry_after_s": -1.0},
        {"retry_after_jitter": math.inf},
    ],
)
def test_invalid_policies(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        RetryPolicy(**fields)


@pytest.mark.parametrize(("retry", "draw"), [(0, 0.0), (-1, 0.0), (1, 1.0), (1, -0.1)])
def test_invalid_backoff_inputs(retry: int, draw: float) -> None:
    with pytest.raises(InvalidInputError):
        backoff_delay_s(retry, CLIENT, draw)
    with pytest.raises(ValueError):  # InvalidInputError is a ValueError
        next_delay_s(retry, CLIENT, draw)


def test_the_policy_is_frozen() -> None:
    with pytest.raises(AttributeError):
        CLIENT.attempts = 3  # type: ignore[misc]
