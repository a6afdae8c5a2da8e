"""Flush requests and job status.

``POST .../flush`` answers 202 only once the serving job's job row exists (the store writes it
before the request is published or coalesced), so a 202 is durable. Redis down: 503 with
``Retry-After``, and no queued row is left behind (the flush module fails its fresh row).
"""

from __future__ import annotations

from typing import Annotated, Any, cast

from fastapi import APIRouter, Body
from fastapi.responses import Response

from om_api.schemas import ErrorBody, FlushRequest, FlushTicket, JobOut, JobState
from om_api.server.auth import TenantId
from om_api.server.convert import erasure_job_out, job_out, json_answer
from om_api.server.logging import bind_log_context, redact_text
from om_api.server.metrics import EnqueueOutcome
from om_api.server.routes import JobPath, SessionPath, error_answers
from om_api.server.state import ApiState, State
from om_api.server.usage_wire import job_usage_out
from om_workers.coordination.coalesce import ServingJob
from om_workers.errors import CoordinationError, FlushJobNotFoundError
from om_workers.jobs.requests import idle_flush, request_flush

router = APIRouter(prefix="/v1", tags=["flush"])
ERRORS: dict[int | str, dict[str, Any]] = {
    **error_answers(401, 404, 422),
    503: {"model": ErrorBody, "description": "Redis is unavailable; retry after Retry-After."},
}


@router.post(
    "/sessions/{session_id}/flush",
    status_code=202,
    response_model=FlushTicket,
    responses=ERRORS,
)
async def flush(
    state: State,
    tenant_id: TenantId,
    session_id: SessionPath,
    body: Annotated[FlushRequest | None, Body()] = None,
) -> Response:
    """Request a flush; returns the job serving it.

    ``coalesced`` is true when a job that existed already answers: one pending for the
    session, or, for a request with nothing to do (unobserved tokens below
    ``observation.messageTokens``, no option), the session's newest queued, running or
    succeeded job, found in one read with no write, Redis call or publish. 404 for a missing
    or another tenant's session (checked before Redis is touched), 503 + ``Retry-After``
    when Redis is down.
    """
    # Asked after every agent turn, mostly with nothing to do: that answer is one read, on the
    # event loop for a local store (SQLite; cheaper than the hop), else in the read lane (the
    # write lane's threads are for writes); the store and Redis of an accepted request in one
    # hop into the write lane; the rest (metrics, the answer) on the event loop.
    request = body or FlushRequest()
    if state.local_store:
        serving = _idle(state, tenant_id, session_id, request)
    else:
        serving = await state.lanes.read.run(_idle, state, tenant_id, session_id, request)
    if serving is None:
        serving = await state.lanes.write.run(_requested, state, tenant_id, session_id, request)
    bind_log_context(job_id=serving.job_id)
    state.metrics.observe_enqueue(_outcome(serving))
    ticket = FlushTicket(
        job_id=serving.job_id,
        coalesced=serving.coalesced,
        state=cast("JobState", serving.state),
    )
    return json_answer(ticket, status_code=202)


def _idle(
    state: ApiState, tenant_id: str, session_id: str, request: FlushRequest
) -> ServingJob | None:
    return idle_flush(
        state.store,
        tenant_id,
        session_id,
        force=request.force,
        full_reflection_rebuild=request.full_reflection_rebuild,
        idle_below_tokens=state.memory_settings.observation.message_tokens,
    )


def _requested(
    state: ApiState, tenant_id: str, session_id: str, request: FlushRequest
) -> ServingJob:
    try:
        return request_flush(
            state.store,
            state.redis,
            tenant_id,
            session_id,
            publish=state.publisher(),
            force=request.force,
            full_reflection_rebuild=request.full_reflection_rebuild,
            idle_below_tokens=state.memory_settings.observation.message_tokens,
        )
    except CoordinationError:
        # Existence before availability: another tenant's session is a 404 even while Redis
        # is down. Checked only here: on the way in, the job row (or the pending job, which
        # is the tenant's own) already proves the session exists, without a read of its own.
        state.store.get_session(tenant_id, session_id)
        state.metrics.observe_enqueue("unavailable")
        raise


def _outcome(serving: ServingJob) -> EnqueueOutcome:
    if serving.idle:
        return "idle"
    return "coalesced" if serving.coalesced else "published"


@router.get("/jobs/{job_id}", response_model=JobOut, responses=ERRORS)
def get_job(state: State, tenant_id: TenantId, job_id: JobPath) -> JobOut:
    """A flush or erasure job's state (queued, running, succeeded, failed, skipped), timings,
    counts and redacted error; a flush job's model usage (written when it finished) and its
    cost at ``OM_PRICES``. 404 for an unknown job or another tenant's."""
    try:
        job = state.store.get_job(tenant_id, job_id)
    except FlushJobNotFoundError:
        erasure = state.store.erasure.get_job(tenant_id, job_id)
        error = redact_text(erasure.error, state.secrets) if erasure.error is not None else None
        return erasure_job_out(erasure, error)
    error = redact_text(job.error, state.secrets) if job.error is not None else None
    usage = job_usage_out(state.store.usage.of_job(tenant_id, job.id), state.settings.llm.prices)
    return job_out(job, error).model_copy(update={"usage": usage})
