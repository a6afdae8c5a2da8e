"""The console's actions on a session, each behind a confirmation page: request a flush,
erase the session, export it (download NDJSON). The POST of each carries the sign-in's form
token, and runs what the HTTP route runs (the same job rows, audit records and publishers)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Final, Literal

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from om_api.server.console.guard import guarded, visible_tenant
from om_api.server.console.render import page
from om_api.server.console.signin import CurrentViewer, Viewer, check_form_token, read_form
from om_api.server.portability import NDJSON, export_lines
from om_api.server.routes import SessionPath, TenantPath
from om_api.server.state import ApiState, State
from om_workers.context_cache import context_cache
from om_workers.jobs.requests import request_flush

router = APIRouter(
    prefix="/console/tenants/{tenant_id}/sessions/{session_id}", include_in_schema=False
)

Action = Literal["flush", "erase", "export"]
ACTIONS: Final[dict[str, str]] = {
    "flush": "Request a flush: the workers observe (and, past its threshold, reflect on) what "
    "memory does not cover yet, now, whatever the observer's threshold.",
    "erase": "Erase this session for good: its messages, memory, jobs and every copy the "
    "funnel made. It disappears at once and cannot be undone.",
    "export": "Download this session as JSON lines (secrets redacted). The export is recorded "
    "in the audit trail.",
}


def _confirm(
    state: ApiState, viewer: Viewer, tenant_id: str, session_id: str, action: str
) -> HTMLResponse:
    visible_tenant(state, viewer, tenant_id)
    info = state.store.get_session(tenant_id, session_id)
    return page(
        "confirm.html",
        viewer=viewer,
        tenant_id=tenant_id,
        info=info,
        action=action,
        explanation=ACTIONS[action],
    )


@router.get("/flush", response_class=HTMLResponse)
@guarded
def confirm_flush(
    state: State, viewer: CurrentViewer, tenant_id: TenantPath, session_id: SessionPath
) -> HTMLResponse:
    """Confirmation of a flush request."""
    return _confirm(state, viewer, tenant_id, session_id, "flush")


@router.get("/erase", response_class=HTMLResponse)
@guarded
def confirm_erase(
    state: State, viewer: CurrentViewer, tenant_id: TenantPath, session_id: SessionPath
) -> HTMLResponse:
    """Confirmation of an erasure."""
    return _confirm(state, viewer, tenant_id, session_id, "erase")


@router.get("/export", response_class=HTMLResponse)
@guarded
def confirm_export(
    state: State, viewer: CurrentViewer, tenant_id: TenantPath, session_id: SessionPath
) -> HTMLResponse:
    """Confirmation of an export."""
    return _confirm(state, viewer, tenant_id, session_id, "export")


@guarded
def _flush(state: ApiState, viewer: Viewer, tenant_id: str, session_id: str) -> Response:
    visible_tenant(state, viewer, tenant_id)
    serving = request_flush(
        state.store, state.redis, tenant_id, session_id, publish=state.publisher(), force=True
    )
    state.metrics.observe_enqueue("coalesced" if serving.coalesced else "published")
    return RedirectResponse(f"/console/tenants/{tenant_id}/jobs/{serving.job_id}", status_code=303)


@guarded
def _erase(state: ApiState, viewer: Viewer, tenant_id: str, session_id: str) -> Response:
    visible_tenant(state, viewer, tenant_id)
    job = state.store.erasure.erase_session(tenant_id, session_id, viewer.signin.key_id)
    state.publish_erasure(job.id)
    context_cache(state.store).forget(tenant_id, session_id)
    return RedirectResponse(f"/console/tenants/{tenant_id}/jobs/{job.id}", status_code=303)


@guarded
def _export(state: ApiState, viewer: Viewer, tenant_id: str, session_id: str) -> Response:
    visible_tenant(state, viewer, tenant_id)
    lines = export_lines(state.store.export_session(tenant_id, session_id), state.secrets)
    first = next(lines)  # a missing session is a 404 page, not a broken download
    state.accounts.record_audit(tenant_id, viewer.signin.key_id, "export", session_id, "accepted")
    return StreamingResponse(
        itertools.chain([first], lines),
        media_type=NDJSON,
        headers={"Content-Disposition": f'attachment; filename="{session_id}.ndjson"'},
    )


async def _act(
    request: Request,
    state: ApiState,
    viewer: Viewer,
    run: Callable[..., Response],
    tenant_id: str,
    session_id: str,
) -> Response:
    form = await read_form(request)
    check_form_token(form.get("form_token"), viewer.form_token)
    return await run_in_threadpool(
        run, state=state, viewer=viewer, tenant_id=tenant_id, session_id=session_id
    )


@router.post("/flush")
async def flush(
    request: Request,
    state: State,
    viewer: CurrentViewer,
    tenant_id: TenantPath,
    session_id: SessionPath,
) -> Response:
    """Request a forced flush; 303 to the job's page."""
    return await _act(request, state, viewer, _flush, tenant_id, session_id)


@router.post("/erase")
async def erase(
    request: Request,
    state: State,
    viewer: CurrentViewer,
    tenant_id: TenantPath,
    session_id: SessionPath,
) -> Response:
    """Erase the session; 303 to the erasure job's page."""
    return await _act(request, state, viewer, _erase, tenant_id, session_id)


@router.post("/export")
async def export(
    request: Request,
    state: State,
    viewer: CurrentViewer,
    tenant_id: TenantPath,
    session_id: SessionPath,
) -> Response:
    """The session's export as a download."""
    return await _act(request, state, viewer, _export, tenant_id, session_id)
