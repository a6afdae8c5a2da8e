"""Admin routes (``OM_ADMIN_TOKEN``) for what the service must be able to forget and explain:
erasing a whole tenant, reading any erasure job, retention periods with their dry run, and
the audit trail."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from om_api.schemas import (
    MAX_AUDIT_EVENTS,
    MAX_RETENTION_LISTING,
    PATH_ID_PATTERN,
    AuditOut,
    ErasureTicket,
    JobOut,
    RetentionOut,
    RetentionRequest,
)
from om_api.server.auth import Admin
from om_api.server.convert import audit_out, erasure_job_out
from om_api.server.logging import redact_text
from om_api.server.routes import JobPath, TenantPath, error_answers
from om_api.server.state import State
from om_workers.jobs.retention import retention_dry_run
from om_workers.store.unit_of_work import utc_now

router = APIRouter(prefix="/v1/admin", tags=["admin"])
ERRORS = error_answers(401, 404, 422)


@router.delete(
    "/tenants/{tenant_id}", status_code=202, response_model=ErasureTicket, responses=ERRORS
)
def erase_tenant(state: State, _: Admin, tenant_id: TenantPath) -> JSONResponse:
    """Erase a whole tenant: at once its keys are revoked (401; on other API processes within
    ``OM_API_KEY_CACHE_S``) and its sessions hidden; the job then erases every session as
    ``DELETE /v1/sessions/{id}`` does and deletes the tenant. Read the job at
    ``GET /v1/admin/jobs/{job_id}``. 404 for an unknown tenant."""
    job = state.store.erasure.erase_tenant(tenant_id)
    state.keys.forget_tenant(tenant_id)
    state.publish_erasure(job.id)
    return JSONResponse(ErasureTicket(job_id=job.id).model_dump(mode="json"), status_code=202)


@router.get("/jobs/{job_id}", response_model=JobOut, responses=ERRORS)
def erasure_job(state: State, _: Admin, job_id: JobPath) -> JobOut:
    """Any tenant's erasure job (a tenant's own erasure revokes the keys that could read it).
    404 for an unknown job."""
    job = state.store.erasure.get_job(None, job_id)
    error = redact_text(job.error, state.secrets) if job.error is not None else None
    return erasure_job_out(job, error)


@router.put("/tenants/{tenant_id}/retention", response_model=RetentionOut, responses=ERRORS)
def set_retention(
    state: State, _: Admin, tenant_id: TenantPath, body: RetentionRequest
) -> RetentionOut:
    """Set (or, with ``null``, clear) the tenant's retention period; answers the dry run of the
    new period. 404 for an unknown tenant."""
    state.accounts.set_retention_days(tenant_id, body.days)
    return _dry_run(state, tenant_id, 100)


@router.get("/tenants/{tenant_id}/retention", response_model=RetentionOut, responses=ERRORS)
def get_retention(
    state: State,
    _: Admin,
    tenant_id: TenantPath,
    limit: Annotated[int, Query(ge=1, le=MAX_RETENTION_LISTING)] = 100,
) -> RetentionOut:
    """The tenant's retention period and its dry run: the sessions (up to ``limit``) that a
    retention pass would erase now. Writes nothing. 404 for an unknown tenant."""
    return _dry_run(state, tenant_id, limit)


def _dry_run(state: State, tenant_id: str, limit: int) -> RetentionOut:
    run = retention_dry_run(state.store, state.accounts, tenant_id, now=utc_now(), limit=limit)
    return RetentionOut(
        tenant_id=run.tenant_id,
        retention_days=run.retention_days,
        cutoff=run.cutoff,
        would_erase=list(run.session_ids),
    )


@router.get("/audit", response_model=AuditOut, responses=ERRORS)
def audit(
    state: State,
    _: Admin,
    tenant: Annotated[str | None, Query(pattern=PATH_ID_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_EVENTS)] = 100,
) -> AuditOut:
    """The newest audit events (of one ``tenant``, or of all), newest first: who erased,
    exported or imported what, when, and how it ended. Never content."""
    events = state.accounts.audit_events(tenant, limit)
    return audit_out(events)
