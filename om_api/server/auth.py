"""Bearer authentication: an API key names exactly one tenant; admin routes need the admin token.

The tenant always comes from the key, never from a path or a body. No key, a malformed header
or an unknown/revoked key is a 401 with ``WWW-Authenticate: Bearer``. A presented key is added
to the redaction registry before it is looked up, so it cannot reach a log line even when the
lookup fails.

A key that resolved is trusted for ``OM_API_KEY_CACHE_S`` (1 s) before it is read again
(:mod:`om_api.server.key_cache`): a revocation through ``POST /v1/admin/keys/{id}/revoke``
refuses the key's next request on the replica that served it, and on every other replica (and
after ``om keys revoke``) within that time. Unknown and revoked keys are read every time.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.types import Scope

from om_api.server.errors import ApiError
from om_api.server.limits import request_class
from om_api.server.logging import bind_log_context
from om_api.server.state import ApiState, State
from om_core.policy.rate_limit import RequestClass
from om_workers.errors import InvalidApiKeyError

MAX_KEY_CHARS = 512
"""Longer bearer values are refused before hashing (they cannot be keys)."""

bearer = HTTPBearer(auto_error=False, description="An API key (tenant routes) or OM_ADMIN_TOKEN.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def _token(token: str | None) -> str:
    if not token:
        raise ApiError(401, "unauthorized", "missing bearer API key")
    if len(token) > MAX_KEY_CHARS:
        raise ApiError(401, "unauthorized", "invalid API key")
    return token


def _looked_up(state: ApiState, token: str) -> tuple[str, str]:
    try:
        return state.keys.resolve(token)
    except InvalidApiKeyError:
        raise ApiError(401, "unauthorized", "invalid API key") from None


def _admitted(state: ApiState, token: str, found: tuple[str, str]) -> tuple[str, str]:
    # Only real keys join the redaction set (bounded by the keys that exist); a rejected
    # value is never echoed anywhere, so it needs no redaction.
    state.registry.add(token)
    return found


def resolve_key(state: ApiState, token: str | None) -> tuple[str, str]:
    """``(tenant id, key id)`` of a bearer API key (``None``: none was sent), through the key
    cache; the key joins the redaction registry. Raises a 401 :class:`ApiError` for a missing,
    overlong, unknown or revoked key; spends no rate limit. Blocking: reads the store when the
    key is not cached."""
    token = _token(token)
    return _admitted(state, token, _looked_up(state, token))


def bearer_token(authorization: str | None) -> str | None:
    """The credentials of an ``Authorization: Bearer ...`` header value, read as the
    framework's ``HTTPBearer`` reads them; ``None`` for no header or another scheme."""
    scheme, _, credentials = (authorization or "").partition(" ")
    credentials = credentials.strip()
    if not (scheme and credentials) or scheme.lower() != "bearer":
        return None
    return credentials


async def admit_key(
    scope: Scope, state: ApiState, token: str, found: tuple[str, str], spent: RequestClass
) -> str:
    """The tenant id of a resolved key ``found`` (``(tenant id, key id)`` of ``token``), after
    spending one request of class ``spent`` of the key's rate limit: the key joins the
    redaction registry, its id the request's state (for the audit trail) and its tenant the
    log context. Raises a 429 :class:`~om_api.server.limits.RateLimitedError` over the limit.
    A busy key spends from the process's lease on the event loop; only a new lease asks
    Redis, in the thread pool."""
    tenant_id, key_id = _admitted(state, token, found)
    scope.setdefault("state", {})["om_key_id"] = key_id
    bind_log_context(tenant_id=tenant_id)
    # Limited per key, not per tenant: a tenant's keys are its separate clients. An unknown
    # key never reaches here, so guessing keys cannot fill Redis with buckets.
    if state.limits.enabled and not state.limits.spend_leased(tenant_id, key_id, spent):
        await run_in_threadpool(state.limits.check, tenant_id, key_id, spent)
    return tenant_id


async def require_tenant(request: Request, state: State, credentials: Credentials) -> str:
    """The tenant id of the request's API key, after spending one request of the key's rate
    limit (:func:`admit_key`). Raises a 401 :class:`ApiError`, or a 429
    :class:`~om_api.server.limits.RateLimitedError` over the limit.

    A coroutine that leaves the event loop only for I/O: a key not cached (the store) and a
    new lease of the key's rate limit (Redis) run in the thread pool.
    """
    token = _token(credentials.credentials if credentials else None)
    found = state.keys.cached(token)
    if found is None:
        found = await run_in_threadpool(_looked_up, state, token)
    template = str(getattr(request.scope.get("route"), "path", request.url.path))
    return await admit_key(
        request.scope, state, token, found, request_class(request.method, template)
    )


def request_key_id(request: Request) -> str | None:
    """The id (never the secret) of the API key that authenticated this request, for the audit
    trail; ``None`` before :func:`require_tenant` ran."""
    key_id = getattr(request.state, "om_key_id", None)
    return key_id if isinstance(key_id, str) else None


def require_admin(state: State, credentials: Credentials) -> None:
    """Pass only with ``OM_ADMIN_TOKEN`` (compared in constant time); unset token: always 401."""
    token = _token(credentials.credentials if credentials else None)
    expected = state.settings.api.admin_token
    if not expected or not hmac.compare_digest(token.encode(), expected.encode()):
        raise ApiError(401, "unauthorized", "invalid admin token")


TenantId = Annotated[str, Depends(require_tenant)]
Admin = Annotated[None, Depends(require_admin)]
