"""Erasure by a tenant's key: a session, or every session of one end user (a subject).

Each answers 202 with an erasure job once what it erases is hidden: from that commit on, every
route answers 404 for those sessions and listings skip them. A worker (``om.erase``) then
deletes them for good; read the job at ``GET /v1/jobs/{job_id}``. If the broker cannot take the
job now it is still durable: the reconciler publishes it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse

from om_api.schemas import SUBJECT_PATTERN, ErasureTicket
from om_api.server.auth import TenantId, request_key_id
from om_api.server.logging import bind_log_context
from om_api.server.routes import SessionPath, error_answers
from om_api.server.state import State
from om_workers.context_cache import context_cache

router = APIRouter(prefix="/v1", tags=["erasure"])
ERRORS: dict[int | str, dict[str, Any]] = error_answers(401, 404, 422)
SubjectPath = Annotated[
    str,
    Path(
        pattern=SUBJECT_PATTERN,
        description="The end user named by sessions' metadata.subject.",
    ),
]


def _accepted(state: State, job_id: str) -> JSONResponse:
    bind_log_context(job_id=job_id)
    state.publish_erasure(job_id)
    return JSONResponse(ErasureTicket(job_id=job_id).model_dump(mode="json"), status_code=202)


@router.delete(
    "/sessions/{session_id}", status_code=202, response_model=ErasureTicket, responses=ERRORS
)
def erase_session(
    state: State, tenant_id: TenantId, session_id: SessionPath, request: Request
) -> JSONResponse:
    """Erase the session: its entries, memory, snapshots, jobs, tombstones and links, its Redis
    keys, and its funnel copies on workspaces with the memory those derived (the workspace
    re-observes what is left). 404 at once on every route; a second request answers the same
    job (a failed one is queued again). 404 for a session the tenant never had."""
    job = state.store.erasure.erase_session(tenant_id, session_id, request_key_id(request))
    context_cache(state.store).forget(tenant_id, session_id)
    return _accepted(state, job.id)


@router.delete(
    "/subjects/{subject}", status_code=202, response_model=ErasureTicket, responses=ERRORS
)
def erase_subject(
    state: State, tenant_id: TenantId, subject: SubjectPath, request: Request
) -> JSONResponse:
    """Erase every session of the tenant whose ``metadata.subject`` is ``subject`` (one end
    user's data), as one job; a subject with no session gets a job with nothing to do."""
    job = state.store.erasure.erase_subject(tenant_id, subject, request_key_id(request))
    return _accepted(state, job.id)
