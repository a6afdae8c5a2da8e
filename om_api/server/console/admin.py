"""The admin's pages (the admin token's sign-in only; a tenant key gets a 404): tenants, one
tenant's keys (ids and prefixes, never a key) and rate limits, and the fair queue."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from om_api.server.console.guard import NotVisible, guarded
from om_api.server.console.render import page
from om_api.server.console.signin import CurrentViewer, Viewer
from om_api.server.convert import queue_out
from om_api.server.limits import default_limits, limits_out
from om_api.server.routes import TenantPath
from om_api.server.state import State
from om_workers.coordination.fairness import FairQueue
from om_workers.store.console_queries import list_tenants

router = APIRouter(prefix="/console/admin", include_in_schema=False)


def _admin_only(viewer: Viewer) -> None:
    if not viewer.admin:
        raise NotVisible("no such page")


@router.get("", response_class=HTMLResponse)
@guarded
def overview(state: State, viewer: CurrentViewer) -> HTMLResponse:
    """Every tenant and the fair queue of flush jobs, busiest tenant first."""
    _admin_only(viewer)
    queue = queue_out(*FairQueue(state.redis).load())
    return page("admin.html", viewer=viewer, tenants=list_tenants(state.store), queue=queue)


@router.get("/tenants/{tenant_id}", response_class=HTMLResponse)
@guarded
def tenant(state: State, viewer: CurrentViewer, tenant_id: TenantPath) -> HTMLResponse:
    """One tenant: its API keys (id, prefix, label, times) and its effective rate limits."""
    _admin_only(viewer)
    found = state.accounts.get_tenant(tenant_id)
    limits = limits_out(
        tenant_id, state.accounts.get_rate_limits(tenant_id), default_limits(state.settings)
    )
    keys = state.accounts.list_api_keys(tenant_id)
    return page("tenant.html", viewer=viewer, tenant=found, limits=limits, keys=keys)
