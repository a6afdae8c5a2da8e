"""Work scopes (open, close, enter, leave, bind, unbind, grant, revoke) and revocations.

Scope operations run the core's :class:`WorkScopeController` over the store's session handle,
so every rule of the core (id pattern, caps, closed parents, grant authority ...) holds and a
refused operation appends nothing.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from om_api.schemas import (
    ErrorBody,
    OpenScopeRequest,
    RevocationOut,
    RevocationRequest,
    ScopePrincipalsRequest,
    ScopeRecordOut,
    ScopeRefsRequest,
)
from om_api.server.auth import TenantId
from om_api.server.convert import entry_out
from om_api.server.errors import ApiError
from om_api.server.routes import ScopePath, SessionPath
from om_api.server.state import ApiState, State
from om_core import SessionEntry, WorkScopeController
from om_core.flush.revocation import drop_resting_on
from om_workers.store import SqlMemoryUnitOfWork, tombstone_scope

router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["scopes"])
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody},
    404: {"model": ErrorBody},
    409: {"model": ErrorBody},
    422: {"model": ErrorBody},
}


def _controller(state: ApiState, tenant_id: str, session_id: str) -> WorkScopeController:
    # Existence first, so a missing/foreign session is a 404 before any scope rule runs.
    state.store.get_session(tenant_id, session_id)
    handle = SqlMemoryUnitOfWork(state.store, tenant_id, session_id)
    return WorkScopeController(
        session_id=session_id,
        append_entry=handle.append_entry,
        get_entries=handle.entries,
        secrets=state.secrets,
    )


def _record(state: ApiState, entry: SessionEntry | None) -> ScopeRecordOut:
    # The controller redacts what it writes; redacting the answer too costs nothing.
    return ScopeRecordOut(
        appended=entry is not None, entry=entry_out(entry, state.secrets) if entry else None
    )


@router.post("/scopes", status_code=201, response_model=ScopeRecordOut, responses=ERRORS)
def open_scope(
    state: State, tenant_id: TenantId, session_id: SessionPath, body: OpenScopeRequest
) -> ScopeRecordOut:
    """Open a scope (``om.scope.opened``). 409 when the id was opened before or the parent is
    closed, 404 for an unknown parent, 422 for a malformed id or a cap."""
    controller = _controller(state, tenant_id, session_id)
    return _record(state, controller.open(body.model_dump(exclude_none=True)))


@router.post("/scopes/{scope_id}/close", response_model=ScopeRecordOut, responses=ERRORS)
def close_scope(
    state: State, tenant_id: TenantId, session_id: SessionPath, scope_id: ScopePath
) -> ScopeRecordOut:
    """Close a scope (never reopened). 409 when it is closed already or still entered."""
    return _record(state, _controller(state, tenant_id, session_id).close(scope_id))


@router.post("/scopes/{scope_id}/enter", response_model=ScopeRecordOut, responses=ERRORS)
def enter_scope(
    state: State, tenant_id: TenantId, session_id: SessionPath, scope_id: ScopePath
) -> ScopeRecordOut:
    """Enter a scope: it becomes the leaf scope context renders from. 409 under a closed
    lineage."""
    return _record(state, _controller(state, tenant_id, session_id).enter(scope_id))


@router.post("/scopes/{scope_id}/leave", response_model=ScopeRecordOut, responses=ERRORS)
def leave_scope(
    state: State, tenant_id: TenantId, session_id: SessionPath, scope_id: ScopePath
) -> ScopeRecordOut:
    """Leave the current leaf scope, which must be ``scope_id`` (409 otherwise: leaving pops
    the innermost entered scope, so naming it guards against leaving the wrong one)."""
    controller = _controller(state, tenant_id, session_id)
    leaf = controller.leaf()
    if leaf != scope_id:
        raise ApiError(409, "conflict", f"scope {scope_id!r} is not the current leaf ({leaf!r})")
    return _record(state, controller.leave())


@router.post("/scopes/{scope_id}/bind", response_model=ScopeRecordOut, responses=ERRORS)
def bind_scope(
    state: State,
    tenant_id: TenantId,
    session_id: SessionPath,
    scope_id: ScopePath,
    body: ScopeRefsRequest,
) -> ScopeRecordOut:
    """Bind ``om:``/``reflection:`` refs to the scope; 422 for refs the ledger never
    recorded. ``appended: false`` when all were bound already."""
    controller = _controller(state, tenant_id, session_id)
    return _record(state, controller.bind(scope_id, body.refs))


@router.post("/scopes/{scope_id}/unbind", response_model=ScopeRecordOut, responses=ERRORS)
def unbind_scope(
    state: State,
    tenant_id: TenantId,
    session_id: SessionPath,
    scope_id: ScopePath,
    body: ScopeRefsRequest,
) -> ScopeRecordOut:
    """Unbind refs from the scope; ``appended: false`` when none was bound."""
    controller = _controller(state, tenant_id, session_id)
    return _record(state, controller.unbind(scope_id, body.refs))


@router.post("/scopes/{scope_id}/grant", response_model=ScopeRecordOut, responses=ERRORS)
def grant_scope(
    state: State,
    tenant_id: TenantId,
    session_id: SessionPath,
    scope_id: ScopePath,
    body: ScopePrincipalsRequest,
) -> ScopeRecordOut:
    """Grant principals (session ids) read+write on a shared scope this session owns."""
    controller = _controller(state, tenant_id, session_id)
    return _record(state, controller.grant(scope_id, body.principal_ids))


@router.post("/scopes/{scope_id}/revoke", response_model=ScopeRecordOut, responses=ERRORS)
def revoke_scope(
    state: State,
    tenant_id: TenantId,
    session_id: SessionPath,
    scope_id: ScopePath,
    body: ScopePrincipalsRequest,
) -> ScopeRecordOut:
    """Revoke principals' grants on the scope; ``appended: false`` when none was granted."""
    controller = _controller(state, tenant_id, session_id)
    return _record(state, controller.revoke(scope_id, body.principal_ids))


@router.post("/revocations", response_model=RevocationOut, responses=ERRORS)
def revoke_entries(
    state: State, tenant_id: TenantId, session_id: SessionPath, body: RevocationRequest
) -> RevocationOut:
    """Withhold entries: tombstone them (context, recall, status and view stop showing memory
    resting on them at once) and drop every active observation resting on them.

    Retrying is safe: tombstones are idempotent and observations already dropped are not
    dropped again. Unknown entry ids are tombstoned and drop nothing.
    """
    state.store.get_session(tenant_id, session_id)
    fresh = state.store.add_tombstones(tenant_id, tombstone_scope(session_id), body.entry_ids)
    dropped = drop_resting_on(
        SqlMemoryUnitOfWork(state.store, tenant_id, session_id), body.entry_ids
    )
    return RevocationOut(dropped_observation_ids=list(dropped), tombstoned_ids=list(fresh))
