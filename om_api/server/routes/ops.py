"""Liveness, readiness (Redis and the database) and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from om_api.schemas import HealthOut
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


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format."}},
)
def metrics(state: State) -> Response:
    """Prometheus metrics: requests and latencies by route template, flush enqueue outcomes."""
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)
