"""Liveness, readiness (Redis and the database), Prometheus metrics, and the admin routes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse, Response
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from om_api.schemas import (
    CreateKeyRequest,
    CreateTenantRequest,
    ErrorBody,
    HealthOut,
    KeyOut,
    TenantOut,
)
from om_api.server.auth import Admin
from om_api.server.metrics import CONTENT_TYPE
from om_api.server.routes import TenantPath
from om_api.server.state import ApiState, State
from om_workers.coordination.connection import is_available

router = APIRouter(tags=["ops"])
admin_router = APIRouter(prefix="/v1/admin", tags=["admin"])
ADMIN_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody},
    404: {"model": ErrorBody},
    409: {"model": ErrorBody},
    422: {"model": ErrorBody},
}


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


@admin_router.post("/tenants", status_code=201, response_model=TenantOut, responses=ADMIN_ERRORS)
def create_tenant(state: State, _: Admin, body: CreateTenantRequest) -> TenantOut:
    """Create a tenant (admin token). 409 when the id is taken."""
    tenant = state.store.create_tenant(body.id, body.name)
    return TenantOut(id=tenant.id, name=tenant.name, created_at=tenant.created_at)


@admin_router.post(
    "/tenants/{tenant_id}/keys", status_code=201, response_model=KeyOut, responses=ADMIN_ERRORS
)
def create_key(
    state: State,
    _: Admin,
    tenant_id: TenantPath,
    body: Annotated[CreateKeyRequest | None, Body()] = None,
) -> KeyOut:
    """Create an API key for the tenant (admin token); the plaintext is in this answer only.
    404 for an unknown tenant."""
    created = state.store.create_api_key(tenant_id, (body or CreateKeyRequest()).label)
    state.registry.add(created.plaintext)
    return KeyOut(key_id=created.key_id, tenant_id=created.tenant_id, key=created.plaintext)
