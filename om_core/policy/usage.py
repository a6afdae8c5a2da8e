"""Usage accounting rules: what model tokens cost, and which days a usage report covers.

Prices are the operator's (``OM_PRICES``), in currency units per million tokens; the service
never guesses one. A model without a price has no cost figure (``None``), so an unpriced model
is visibly unpriced instead of looking free. Days are UTC calendar days, ``YYYY-MM-DD``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, timedelta

from pydantic import Field

from om_core.errors import InvalidUsageWindowError
from om_core.ledger.models import Frozen

MAX_USAGE_DAYS = 366
"""The most days one usage report covers (a leap year): a bigger report is asked in parts."""
DEFAULT_USAGE_DAYS = 30
"""The days a report covers when it names no ``since``: the last 30, ``until`` included."""

TOKENS_PER_PRICE_UNIT = 1_000_000
"""Prices are per million tokens, as the vendors publish them."""


class ModelPrice(Frozen):
    """One model's price per million input (prompt) and output (completion) tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


def cost_of(
    prices: Mapping[str, ModelPrice], model: str, input_tokens: int, output_tokens: int
) -> float | None:
    """The cost of ``input_tokens`` and ``output_tokens`` of ``model`` at ``prices``, in the
    prices' currency; ``None`` when ``model`` has no price. Raises ``ValueError`` for a
    negative token count."""
    if input_tokens < 0 or output_tokens < 0:
        raise ValueError("token counts must not be negative")
    price = prices.get(model)
    if price is None:
        return None
    spent = input_tokens * price.input + output_tokens * price.output
    return spent / TOKENS_PER_PRICE_UNIT


def usage_window(since: str | None, until: str | None, today: date) -> tuple[str, str]:
    """The first and last day (inclusive, ``YYYY-MM-DD``) of a usage report.

    ``until`` defaults to ``today``, ``since`` to :data:`DEFAULT_USAGE_DAYS` days ending at
    ``until``. Raises :class:`~om_core.errors.InvalidUsageWindowError` for a day that is not
    ``YYYY-MM-DD``, ``since`` after ``until``, or a window of more than
    :data:`MAX_USAGE_DAYS` days.
    """
    last = _day(until, "until") if until is not None else today
    first = (
        _day(since, "since") if since is not None else last - timedelta(days=DEFAULT_USAGE_DAYS - 1)
    )
    if first > last:
        raise InvalidUsageWindowError(f"since {first} is after until {last}")
    days = (last - first).days + 1
    if days > MAX_USAGE_DAYS:
        raise InvalidUsageWindowError(
            f"{days} days from {first} to {last}; at most {MAX_USAGE_DAYS} per report"
        )
    return first.isoformat(), last.isoformat()


def _day(value: str, name: str) -> date:
    try:
        if len(value) != 10:
            raise ValueError(value)
        return date.fromisoformat(value)
    except ValueError:
        raise InvalidUsageWindowError(
            f"{name} must be a day as YYYY-MM-DD, got {value[:40]!r}"
        ) from None


__all__ = [
    "DEFAULT_USAGE_DAYS",
    "MAX_USAGE_DAYS",
    "TOKENS_PER_PRICE_UNIT",
    "ModelPrice",
    "cost_of",
    "usage_window",
]
