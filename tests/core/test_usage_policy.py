"""Usage accounting rules: costs at per-model prices, and the days a usage report covers."""

from __future__ import annotations

from datetime import date

import pytest

from om_core.errors import InvalidInputError, InvalidUsageWindowError
from om_core.policy.usage import MAX_USAGE_DAYS, ModelPrice, cost_of, usage_window

PRICES = {"gpt-4o-mini": ModelPrice(input=0.15, output=0.6)}
TODAY = date(2026, 12, 3)


def test_cost_is_per_million_tokens_and_none_without_a_price() -> None:
    assert cost_of(PRICES, "gpt-4o-mini", 1_000_000, 1_000_000) == pytest.approx(0.75)
    assert cost_of(PRICES, "gpt-4o-mini", 2000, 500) == pytest.approx(0.0006)
    assert cost_of(PRICES, "gpt-4o-mini", 0, 0) == 0
    assert cost_of(PRICES, "unpriced", 10, 10) is None
    with pytest.raises(ValueError):
        cost_of(PRICES, "gpt-4o-mini", -1, 0)
    with pytest.raises(ValueError):
        ModelPrice(input=-0.1, output=0)


@pytest.mark.parametrize(
    ("since", "until", "window"),
    [
        (None, None, ("2026-11-04", "2026-12-03")),
        ("2026-12-01", None, ("2026-12-01", "2026-12-03")),
        (None, "2026-01-30", ("2026-01-01", "2026-01-30")),
        ("2026-05-05", "2026-05-05", ("2026-05-05", "2026-05-05")),
    ],
)
def test_window_defaults(since: str | None, until: str | None, window: tuple[str, str]) -> None:
    assert usage_window(since, until, TODAY) == window


def test_window_cap_is_enforced_at_its_boundary() -> None:
    first = date.fromordinal(TODAY.toordinal() - MAX_USAGE_DAYS + 1).isoformat()
    assert usage_window(first, TODAY.isoformat(), TODAY)[0] == first
    too_early = date.fromordinal(TODAY.toordinal() - MAX_USAGE_DAYS).isoformat()
    with pytest.raises(InvalidUsageWindowError, match="at most 366"):
        usage_window(too_early, TODAY.isoformat(), TODAY)


@pytest.mark.parametrize(
    ("since", "until"),
    [("2026-12-04", "2026-12-03"), ("yesterday", None), ("2026-13-01", None), ("20261201", None)],
)
def test_bad_windows_are_invalid_input(since: str, until: str | None) -> None:
    with pytest.raises(InvalidInputError):
        usage_window(since, until, TODAY)
