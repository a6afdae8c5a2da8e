"""Liveness, readiness (Redis and the database) and Prometheus metrics.

``/metrics`` is for the deployment's scraper only: its per-tenant series name every busy
tenant and its activity, so it answers 404 unless ``OM_METRICS_TOKEN`` is set, and 401 to a
request without that token as its bearer credential.
"""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from om_api.schemas import ErrorBody, HealthOut
from om_api.server.metrics import CONTENT_TYPE
from om_api.server.state import ApiState, State
from om_workers.coordination.connection import is_available

router = APIRouter(tags=["ops"])


@router.get("/healthz", response_model=HealthOut)
def healthz() -> HealthOut:
    """Liveness: the process answers. Checks nothing else, so a Redis outage never restarts
    healthy API processes."""
    return HealthOut(status="ok")


def _database_ok(state: ApiState) -> bool:
    try:
        with state.store.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError:
        return False
    return True


@router.get(
    "/readyz",
    response_model=HealthOut,
    responses={503: {"model": HealthOut, "description": "Redis or the database is down."}},
)
def readyz(state: State) -> JSONResponse:
    """Readiness: Redis answers PING and the database answers a query; 503 otherwise."""
    checks = {"redis": is_available(state.redis), "database": _database_ok(state)}
    ready = all(checks.values())
    body = HealthOut(status="ok" if ready else "unavailable", checks=checks)
    return JSONResponse(body.model_dump(mode="json"), status_code=200 if ready else 503)


def _refuse(status: int, error: str, detail: str, request: Request) -> JSONResponse:
    body = ErrorBody(error=error, detail=detail, request_id=request.state.request_id)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


def _scrape_refusal(expected: str | None, request: Request) -> JSONResponse | None:
    """The answer to a scrape without the right token (``None`` when it may read)."""
    if not expected:
        return _refuse(404, "not_found", "metrics are not served on this port", request)
    scheme, _, offered = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(offered.encode(), expected.encode()):
        return None
    return _refuse(401, "unauthorized", "metrics need the metrics token as bearer", request)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format."},
        401: {"description": "No metrics token, or the wrong one."},
        404: {"description": "OM_METRICS_TOKEN is unset: metrics are not served."},
    },
)
def metrics(state: State, request: Request) -> Response:
    """Prometheus metrics: requests and latencies by route template, flush enqueue outcomes,
    per-tenant load. Needs ``Authorization: Bearer <OM_METRICS_TOKEN>``: 401 without it, 404
    when no token is configured."""
    refusal = _scrape_refusal(state.settings.metrics.token, request)
    if refusal is not None:
        return refusal
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)
