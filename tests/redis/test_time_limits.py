"""Which flush time limits a worker runs with, from whichever of OM_SOFT_TIME_LIMIT_S,
OM_HARD_TIME_LIMIT_S and OM_VISIBILITY_TIMEOUT_S are set: one table, pure function."""

from __future__ import annotations

from dataclasses import astuple

import pytest

from om_workers.coordination.timing import TimeLimits, resolve_time_limits

# Provider defaults: 60 s HTTP timeout, 3 attempts, 30 s backoff cap, 300 s queue wait, so
# the derived soft limit is 3 x (3 x 60 + 2 x 30) x 1.1 = 792 s, the grace 79.2 s.
DERIVED = TimeLimits(60, 792, 871.2, 1250.4)

OK = [
    # soft, hard, visibility, RabbitMQ?  ->  limits
    ("nothing set: all derived", None, None, None, False, DERIVED),
    ("visibility alone: limits derived", None, None, 2000, False, TimeLimits(60, 792, 871.2, 2000)),
    ("visibility just above hard", None, None, 900, False, TimeLimits(60, 792, 871.2, 900)),
    ("the pair: visibility derived", 100, 200, None, False, TimeLimits(60, 100, 200, 530)),
    ("all three as given", 70, 80, 90, False, TimeLimits(60, 70, 80, 90)),
    ("RabbitMQ: the pair", 100, 200, None, True, TimeLimits(60, 100, 200, 530)),
    ("RabbitMQ: visibility unordered", 100, 200, 5, True, TimeLimits(60, 100, 200, 5)),
]

REFUSED = [
    ("visibility below the derived hard", None, None, 800, False, "hard_time_limit_s"),
    ("soft alone", 100, None, None, False, "OM_SOFT_TIME_LIMIT_S is set without"),
    ("hard alone", None, 200, 900, False, "OM_HARD_TIME_LIMIT_S is set without"),
    ("hard alone, RabbitMQ", None, 200, None, True, "OM_HARD_TIME_LIMIT_S is set without"),
    ("soft above hard", 300, 200, 900, False, "soft_time_limit_s"),
    ("soft below the HTTP timeout", 30, 200, 900, False, "http_timeout_s"),
    ("the pair above visibility", 100, 200, 150, False, "visibility_timeout_s"),
]


def _resolve(
    soft: float | None, hard: float | None, visibility: float | None, rabbitmq: bool
) -> TimeLimits:
    return resolve_time_limits(
        http_timeout_s=60,
        max_attempts=3,
        backoff_cap_s=30,
        queue_wait_s=300,
        soft_time_limit_s=soft,
        hard_time_limit_s=hard,
        visibility_timeout_s=visibility,
        visibility_applies=not rabbitmq,
    )


@pytest.mark.parametrize(("case", "soft", "hard", "visibility", "rabbitmq", "expected"), OK)
def test_what_is_not_set_is_derived(
    case: str,
    soft: float | None,
    hard: float | None,
    visibility: float | None,
    rabbitmq: bool,
    expected: TimeLimits,
) -> None:
    got = _resolve(soft, hard, visibility, rabbitmq)
    assert astuple(got) == pytest.approx(astuple(expected)), case


@pytest.mark.parametrize(("case", "soft", "hard", "visibility", "rabbitmq", "message"), REFUSED)
def test_a_lone_limit_or_a_broken_order_is_refused(
    case: str,
    soft: float | None,
    hard: float | None,
    visibility: float | None,
    rabbitmq: bool,
    message: str,
) -> None:
    with pytest.raises(ValueError, match=message):
        _resolve(soft, hard, visibility, rabbitmq)
