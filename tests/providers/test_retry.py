"""Retry timing is a pure function: a table of attempts, draws and Retry-After values."""

from __future__ import annotations

import pytest

from om_workers.providers.retry import (
    RetryPolicy,
    backoff_delay_s,
    is_retryable_status,
    next_delay_s,
    parse_retry_after,
)

POLICY = RetryPolicy(max_attempts=5, base_delay_s=1.0, multiplier=2.0, max_delay_s=5.0, jitter=0.5)


@pytest.mark.parametrize(
    ("retry", "draw", "expected"),
    [
        (1, 0.0, 1.0),
        (2, 0.0, 2.0),
        (3, 0.0, 4.0),
        (4, 0.0, 5.0),  # capped
        (200, 0.0, 5.0),  # no overflow far out
        (1, 0.5, 0.75),  # jitter shortens by up to half
        (3, 0.5, 3.0),
        (2, 0.999, 2.0 * (1 - 0.5 * 0.999)),
    ],
)
def test_backoff_table(retry: int, draw: float, expected: float) -> None:
    assert backoff_delay_s(retry, POLICY, draw) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("attempt", "retry_after", "expected"),
    [
        (1, None, 1.0),
        (4, None, 5.0),
        (5, None, None),  # last attempt used
        (1, 3.0, 3.0),  # Retry-After honoured exactly
        (1, 0.0, 0.0),
        (1, 60.0, 60.0),
        (1, 61.0, None),  # asks for too long: give up
        (5, 1.0, None),
    ],
)
def test_next_delay_table(attempt: int, retry_after: float | None, expected: float | None) -> None:
    assert next_delay_s(attempt, POLICY, 0.0, retry_after_s=retry_after) == expected


@pytest.mark.parametrize(
    ("header", "now", "expected"),
    [
        (None, None, None),
        ("2", None, 2.0),
        (" 1.5 ", None, 1.5),
        ("-4", None, 0.0),
        ("soon", 0.0, None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470.0, 10.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 1445412490.0, 0.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None, None),
        ("nan", None, None),
    ],
)
def test_parse_retry_after(header: str | None, now: float | None, expected: float | None) -> None:
    assert parse_retry_after(header, now) == expected


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(200, False), (400, False), (401, False), (408, True), (429, True), (500, True), (503, True)],
)
def test_retryable_statuses(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable


def test_invalid_policies_and_inputs() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(jitter=1.5)
    with pytest.raises(ValueError):
        RetryPolicy(base_delay_s=float("inf"))
    with pytest.raises(ValueError):
        backoff_delay_s(0, POLICY, 0.0)
    with pytest.raises(ValueError):
        backoff_delay_s(1, POLICY, 1.0)
