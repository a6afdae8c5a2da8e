"""The provider adapters' retry rules: retryable statuses and the default policy's shape.

The timing itself is :mod:`om_core.policy.backoff`'s, tabled in ``tests/core/test_backoff.py``.
"""

from __future__ import annotations

import pytest

from om_core.policy.backoff import backoff_delay_s, next_delay_s
from om_workers.providers.retry import PROVIDER_RETRY_POLICY, is_retryable_status


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(200, False), (400, False), (401, False), (408, True), (429, True), (500, True), (503, True)],
)
def test_retryable_statuses(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable


@pytest.mark.parametrize(
    ("attempt", "draw", "retry_after", "expected"),
    [
        (1, 0.0, None, 0.5),
        (1, 0.5, None, 0.375),  # half jitter
        (3, 0.0, None, 2.0),
        (4, 0.0, None, None),  # four attempts
        (1, 0.9, 60.0, 60.0),  # Retry-After honoured exactly
        (1, 0.0, 60.5, None),  # longer than a task can wait: give up
    ],
)
def test_default_provider_policy(
    attempt: int, draw: float, retry_after: float | None, expected: float | None
) -> None:
    got = next_delay_s(attempt, PROVIDER_RETRY_POLICY, draw, retry_after_s=retry_after)
    assert got == expected


def test_default_provider_backoff_caps_at_twenty_seconds() -> None:
    assert backoff_delay_s(50, PROVIDER_RETRY_POLICY, 0.0) == 20.0
