"""Admin route (``OM_ADMIN_TOKEN``) for what tenants cost: model usage per tenant per day."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from om_api.schemas import PATH_ID_PATTERN, UsageReportOut
from om_api.server.auth import Admin
from om_api.server.routes import error_answers
from om_api.server.state import State
from om_api.server.usage_wire import usage_report_out
from om_core.policy.usage import usage_window
from om_workers.store.unit_of_work import utc_now

router = APIRouter(prefix="/v1/admin", tags=["admin"])
ERRORS = error_answers(401, 404, 422)
Day = Annotated[str | None, Query(min_length=10, max_length=10, description="YYYY-MM-DD, UTC.")]


@router.get("/usage", response_model=UsageReportOut, responses=ERRORS)
def usage(
    state: State,
    _: Admin,
    tenant: Annotated[str | None, Query(pattern=PATH_ID_PATTERN)] = None,
    since: Day = None,
    until: Day = None,
) -> UsageReportOut:
    """Model tokens per tenant (one ``tenant``, or all), UTC day and model, as the providers
    reported them, with their cost at ``OM_PRICES``. ``until`` defaults to today, ``since`` to
    29 days before ``until``; at most 366 days (422 beyond, or for ``since`` after
    ``until``). 404 for an unknown tenant."""
    first, last = usage_window(since, until, utc_now().date())
    if tenant is not None:
        state.accounts.get_tenant(tenant)
    rows = state.store.usage.daily(tenant, first, last)
    prices = state.settings.llm.prices
    return usage_report_out(rows, since=first, until=last, tenant_id=tenant, prices=prices)
