"""The wire forms of model usage: a flush job's, and a report per tenant per day, each with
its cost at the configured prices (no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from om_api.schemas import DailyUsageOut, JobUsageOut, ModelUsageOut, UsageReportOut
from om_core.policy.usage import ModelPrice, cost_of

if TYPE_CHECKING:
    from om_workers.store import DailyUsage, ModelUsage


def job_usage_out(usage: Sequence[ModelUsage], prices: Mapping[str, ModelPrice]) -> JobUsageOut:
    """A job's usage by model, with totals and costs at ``prices``."""
    models = [
        ModelUsageOut(
            model=used.model,
            calls=used.calls,
            input_tokens=used.input_tokens,
            output_tokens=used.output_tokens,
            cost=cost_of(prices, used.model, used.input_tokens, used.output_tokens),
        )
        for used in usage
    ]
    return JobUsageOut(
        calls=sum(m.calls for m in models),
        input_tokens=sum(m.input_tokens for m in models),
        output_tokens=sum(m.output_tokens for m in models),
        cost=_total_cost(m.cost for m in models),
        unpriced_models=sorted({m.model for m in models if m.cost is None}),
        models=models,
    )


def usage_report_out(
    rows: Sequence[DailyUsage],
    *,
    since: str,
    until: str,
    tenant_id: str | None,
    prices: Mapping[str, ModelPrice],
) -> UsageReportOut:
    """Daily rows (tenant, day, model) with their costs, and their totals."""
    out = [
        DailyUsageOut(
            tenant_id=row.tenant_id,
            day=row.day,
            model=row.model,
            calls=row.calls,
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            cost=cost_of(prices, row.model, row.input_tokens, row.output_tokens),
        )
        for row in rows
    ]
    return UsageReportOut(
        since=since,
        until=until,
        tenant_id=tenant_id,
        rows=out,
        calls=sum(r.calls for r in out),
        input_tokens=sum(r.input_tokens for r in out),
        output_tokens=sum(r.output_tokens for r in out),
        cost=_total_cost(r.cost for r in out),
        unpriced_models=sorted({r.model for r in out if r.cost is None}),
    )


def _total_cost(costs: Iterable[float | None]) -> float | None:
    priced = [c for c in costs if c is not None]
    return sum(priced) if priced else None


__all__ = ["job_usage_out", "usage_report_out"]
