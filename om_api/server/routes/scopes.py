"""Work scopes (open, close, enter, leave, bind, unbind, grant, revoke) and revocations.

Scope operations run the core's :class:`WorkScopeController` over the store's session handle,
so every rule of the core (id pattern, caps, closed parents, grant authority ...) holds and a
refused operation appends nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends

from om_api.schemas import (
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
from om_api.server.routes import ScopePath, SessionPath, error_answers
from om_api.server.state import ApiState, State
from om_core import SessionEntry, WorkScopeController
from om_core.flush.revocation import drop_resting_on
from om_workers.store import SqlMemoryUnitOfWork, tombstone_scope

router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["scopes"])
ERRORS = error_answers(401, 404, 409, 422)


@dataclass(frozen=True)
class SessionScopes:
    """The work scopes of the request's session: the core's controller over the store's
    session handle, and the answer for what an operation appended."""

    state: ApiState
    tenant_id: str
    session_id: str

    def controller(self) -> WorkScopeController:
        """The controller; :class:`~om_workers.errors.SessionNotFoundError` (404) first, before
        any scope rule runs, for a missing or another tenant's session."""
        store = self.state.store
        store.get_session(self.tenant_id, self.session_id)
        handle = SqlMemoryUnitOfWork(store, self.tenant_id, self.session_id)
        # The snapshot's scope map and ledger plus the entries after it: an operation costs
        # what was appended since the last snapshot, never the session's history.
        return WorkScopeController(
            session_id=self.session_id,
            append_entry=handle.append_visible,
            get_view=handle.scope_view,
            secrets=self.state.secrets,
        )

    def answer(self, entry: SessionEntry | None) -> ScopeRecordOut:
        """What the operation appended (``appended: false`` and no entry when nothing)."""
        # The controller redacts what it writes; redacting the answer too costs nothing.
        out = entry_out(entry, self.state.secrets) if entry else None
        return ScopeRecordOut(appended=entry is not None, entry=out)


def _session_scopes(state: State, tenant_id: TenantId, session_id: SessionPath) -> SessionScopes:
    return SessionScopes(state, tenant_id, session_id)


Scopes = Annotated[SessionScopes, Depends(_session_scopes)]


@router.post("/scopes", status_code=201, response_model=ScopeRecordOut, responses=ERRORS)
def open_scope(scopes: Scopes, body: OpenScopeRequest) -> ScopeRecordOut:
    """Open a scope (``om.scope.opened``). 409 when the id was opened before or the parent is
    closed, 404 for an unknown parent, 422 for a malformed id or a cap."""
    return scopes.answer(scopes.controller().open(body.model_dump(exclude_none=True)))


@router.post("/scopes/{scope_id}/close", response_model=ScopeRecordOut, responses=ERRORS)
def close_scope(scopes: Scopes, scope_id: ScopePath) -> ScopeRecordOut:
    """Close a scope (never reopened). 409 when it is closed already or still entered."""
    return scopes.answer(scopes.controller().close(scope_id))


@router.post("/scopes/{scope_id}/enter", response_model=ScopeRecordOut, responses=ERRORS)
def enter_scope(scopes: Scopes, scope_id: ScopePath) -> ScopeRecordOut:
    """Enter a scope: it becomes the leaf scope context renders from. 409 under a closed
    lineage."""
    return scopes.answer(scopes.controller().enter(scope_id))


@router.post("/scopes/{scope_id}/leave", response_model=ScopeRecordOut, responses=ERRORS)
def leave_scope(scopes: Scopes, scope_id: ScopePath) -> ScopeRecordOut:
    """Leave the current leaf scope, which must be ``scope_id`` (409 otherwise: leaving pops
    the innermost entered scope, so naming it guards against leaving the wrong one)."""
    controller = scopes.controller()
    leaf = controller.leaf()
    if leaf != scope_id:
        raise ApiError(409, "conflict", f"scope {scope_id!r} is not the current leaf ({leaf!r})")
    return scopes.answer(controller.leave())


@router.post("/scopes/{scope_id}/bind", response_model=ScopeRecordOut, responses=ERRORS)
def bind_scope(scopes: Scopes, scope_id: ScopePath, body: ScopeRefsRequest) -> ScopeRecordOut:
    """Bind ``om:``/``reflection:`` refs to the scope; 422 for refs the ledger never
    recorded. ``appended: false`` when all were bound already."""
    return scopes.answer(scopes.controller().bind(scope_id, body.refs))


@router.post("/scopes/{scope_id}/unbind", response_model=ScopeRecordOut, responses=ERRORS)
def unbind_scope(scopes: Scopes, scope_id: ScopePath, body: ScopeRefsRequest) -> ScopeRecordOut:
    """Unbind refs from the scope; ``appended: false`` when none was bound."""
    return scopes.answer(scopes.controller().unbind(scope_id, body.refs))


@router.post("/scopes/{scope_id}/grant", response_model=ScopeRecordOut, responses=ERRORS)
def grant_scope(
    scopes: Scopes, scope_id: ScopePath, body: ScopePrincipalsRequest
) -> ScopeRecordOut:
    """Grant principals (session ids) read+write on a shared scope this session owns."""
    return scopes.answer(scopes.controller().grant(scope_id, body.principal_ids))


@router.post("/scopes/{scope_id}/revoke", response_model=ScopeRecordOut, responses=ERRORS)
def revoke_scope(
    scopes: Scopes, scope_id: ScopePath, body: ScopePrincipalsRequest
) -> ScopeRecordOut:
    """Revoke principals' grants on the scope; ``appended: false`` when none was granted."""
    return scopes.answer(scopes.controller().revoke(scope_id, body.principal_ids))


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
