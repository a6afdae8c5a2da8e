"""Admin routes (``OM_ADMIN_TOKEN``): tenants, their API keys and their rate limits, and the
fair queue of flush jobs by tenant.

A key is listed by id and prefix only; its plaintext exists in the creating answer alone (the
store keeps a hash). Revoking takes effect on the key's next request, on every API replica:
the key is looked up in the store on each request (:func:`om_api.server.auth.require_tenant`),
never cached.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response
from fastapi.responses import StreamingResponse

from om_api.schemas import (
    ApiKeyOut,
    ApiKeysOut,
    CreateKeyRequest,
    CreateTenantRequest,
    FlushQueueOut,
    KeyOut,
    RateLimitsOut,
    SetRateLimitsRequest,
    TenantOut,
)
from om_api.server.auth import Admin
from om_api.server.convert import queue_out
from om_api.server.limits import default_limits, limits_out
from om_api.server.portability import NDJSON, tenant_export_lines
from om_api.server.routes import KeyPath, TenantPath, error_answers
from om_api.server.state import State
from om_core.policy.rate_limit import REQUEST_CLASSES, RateLimit, RequestClass
from om_workers.coordination.fairness import FairQueue

router = APIRouter(prefix="/v1/admin", tags=["admin"])
ERRORS = error_answers(401, 404, 409, 422)


@router.post("/tenants", status_code=201, response_model=TenantOut, responses=ERRORS)
def create_tenant(state: State, _: Admin, body: CreateTenantRequest) -> TenantOut:
    """Create a tenant (admin token). 409 when the id is taken."""
    tenant = state.accounts.create_tenant(body.id, body.name)
    return TenantOut(id=tenant.id, name=tenant.name, created_at=tenant.created_at)


@router.post("/tenants/{tenant_id}/keys", status_code=201, response_model=KeyOut, responses=ERRORS)
def create_key(
    state: State,
    _: Admin,
    tenant_id: TenantPath,
    body: Annotated[CreateKeyRequest | None, Body()] = None,
) -> KeyOut:
    """Create an API key for the tenant (admin token); the plaintext is in this answer only.
    404 for an unknown tenant."""
    created = state.accounts.create_api_key(tenant_id, (body or CreateKeyRequest()).label)
    state.registry.add(created.plaintext)
    return KeyOut(key_id=created.key_id, tenant_id=created.tenant_id, key=created.plaintext)


@router.get("/tenants/{tenant_id}/keys", response_model=ApiKeysOut, responses=ERRORS)
def list_keys(state: State, _: Admin, tenant_id: TenantPath) -> ApiKeysOut:
    """The tenant's API keys, oldest first, revoked ones too: id, prefix, label, creation and
    revocation times, never the key. 404 for an unknown tenant."""
    found = state.accounts.list_api_keys(tenant_id)
    return ApiKeysOut(keys=[ApiKeyOut.model_validate(i, from_attributes=True) for i in found])


@router.post("/keys/{key_id}/revoke", response_model=ApiKeyOut, responses=ERRORS)
def revoke_key(state: State, _: Admin, key_id: KeyPath) -> ApiKeyOut:
    """Revoke an API key by its id (admin token): from now on every request with it is a 401
    on this API replica, and on every other one within ``OM_API_KEY_CACHE_S``. Revoking a
    revoked key changes nothing. 404 for an unknown key id."""
    revoked = state.accounts.revoke_key(key_id)
    state.keys.forget_key(key_id)
    return ApiKeyOut.model_validate(revoked, from_attributes=True)


@router.get("/tenants/{tenant_id}/limits", response_model=RateLimitsOut, responses=ERRORS)
def get_limits(state: State, _: Admin, tenant_id: TenantPath) -> RateLimitsOut:
    """The tenant's per-key rate limits: overrides and effective values (admin token). 404 for
    an unknown tenant."""
    overrides = state.accounts.get_rate_limits(tenant_id)
    return limits_out(tenant_id, overrides, default_limits(state.settings))


@router.put("/tenants/{tenant_id}/limits", response_model=RateLimitsOut, responses=ERRORS)
def set_limits(
    state: State, _: Admin, tenant_id: TenantPath, body: SetRateLimitsRequest
) -> RateLimitsOut:
    """Replace the tenant's per-key rate-limit overrides (admin token); a class left out uses
    the deployment default. Every API replica applies it within ``OM_RATE_LIMIT_CACHE_S``.
    404 for an unknown tenant."""
    given = {"appends": body.appends, "flushes": body.flushes, "reads": body.reads}
    wanted: dict[RequestClass, RateLimit] = {
        name: RateLimit(limit.rate_per_s, limit.burst)
        for name, limit in given.items()
        if limit is not None and name in REQUEST_CLASSES
    }
    overrides = state.accounts.set_rate_limits(tenant_id, wanted)
    state.limits.forget(tenant_id)
    return limits_out(tenant_id, overrides, default_limits(state.settings))


@router.get("/queue", response_model=FlushQueueOut, responses=ERRORS)
def flush_queue(state: State, _: Admin) -> FlushQueueOut:
    """The fair queue of flush jobs (admin token): the backlog and, busiest first, every tenant
    with jobs waiting, queued or running, or with requests refused by a rate limit. 503 when
    Redis is unavailable."""
    return queue_out(*FairQueue(state.redis).load())


@router.get(
    "/tenants/{tenant_id}/export",
    response_class=StreamingResponse,
    responses={200: {"content": {NDJSON: {"schema": {"type": "string"}}}}, **ERRORS},
)
def export_tenant(state: State, _: Admin, tenant_id: TenantPath) -> Response:
    """Every session of the tenant as JSON lines, newest first, one session's export after
    another (each from its ``om.export.header`` to its ``om.export.end`` line), streamed; each
    session imports with ``POST /v1/sessions/{id}/import``. 404 for an unknown tenant."""
    state.accounts.get_tenant(tenant_id)
    state.accounts.record_audit(tenant_id, None, "export", tenant_id, "accepted")
    return StreamingResponse(
        tenant_export_lines(state.store, tenant_id, state.secrets), media_type=NDJSON
    )
