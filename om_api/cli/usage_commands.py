"""``om usage``: model tokens per tenant per day, and their cost at OM_PRICES, read from the
database directly like om audit (--database-url, else OM_DATABASE_URL)."""

from __future__ import annotations

from typing import Annotated

import typer

from om_api.cli.common import DatabaseUrl, JsonOutput, account_store, fail, show, sql_store
from om_api.schemas import UsageReportOut
from om_api.server.usage_wire import usage_report_out
from om_core.errors import InvalidUsageWindowError
from om_core.policy.usage import usage_window
from om_workers.config import get_settings

DayOption = Annotated[str | None, typer.Option(metavar="YYYY-MM-DD", help="A UTC day.")]


def usage(
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant.")] = None,
    since: DayOption = None,
    until: DayOption = None,
    as_json: JsonOutput = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Model tokens per tenant, UTC day and model as the providers reported them, and their
    cost at OM_PRICES. --until defaults to today, --since to 29 days before it (at most 366
    days). Exit 2 for bad days, 1 for an unknown tenant."""
    from om_workers.store.unit_of_work import utc_now  # the store's clock, loaded with it

    try:
        first, last = usage_window(since, until, utc_now().date())
    except InvalidUsageWindowError as exc:
        fail(str(exc), 2)
    if tenant is not None:
        with account_store(database_url) as accounts:
            accounts.get_tenant(tenant)
    with sql_store(database_url) as store:
        rows = store.usage.daily(tenant, first, last)
    prices = get_settings().llm.prices
    report = usage_report_out(rows, since=first, until=last, tenant_id=tenant, prices=prices)
    show(report, as_json, show_usage)


def show_usage(report: UsageReportOut) -> None:
    """The report as a table (tenant, day, model, calls, tokens in and out, cost), then the
    totals."""
    typer.echo(f"usage {report.since} to {report.until} (UTC)")
    if not report.rows:
        typer.echo("no model usage recorded")
        return
    typer.echo(f"{'TENANT':<20} {'DAY':<10} {'MODEL':<24} {'CALLS':>6} {'IN':>10} {'OUT':>10} COST")
    for row in report.rows:
        typer.echo(
            f"{row.tenant_id:<20} {row.day:<10} {row.model:<24} {row.calls:>6} "
            f"{row.input_tokens:>10} {row.output_tokens:>10} {_cost(row.cost)}"
        )
    typer.echo(
        f"total: {report.calls} calls, {report.input_tokens} input and "
        f"{report.output_tokens} output tokens, cost {_cost(report.cost)}"
    )
    if report.unpriced_models:
        typer.echo(f"no price in OM_PRICES for: {', '.join(report.unpriced_models)}")


def _cost(cost: float | None) -> str:
    return "-" if cost is None else f"{cost:.6f}"
