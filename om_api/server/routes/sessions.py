"""Sessions and entries: create/read a session, link it to a workspace, append a batch, page
the current branch."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Body, Query
from fastapi.responses import Response

from om_api.schemas import (
    ENTRY_ID_PATTERN,
    MAX_ENTRIES_PAGE,
    MAX_SESSIONS_PAGE,
    AppendEntriesRequest,
    AppendEntriesResponse,
    CreateSessionRequest,
    EntriesPage,
    LinkRequest,
    SessionOut,
    SessionsPage,
)
from om_api.server.auth import TenantId
from om_api.server.convert import entry_out, json_answer, session_out, to_entry
from om_api.server.errors import ApiError
from om_api.server.routes import SessionPath, error_answers
from om_api.server.state import ApiState, State
from om_workers.errors import EntryNotFoundError, WritersBusyError
from om_workers.store.engine import writers_not_waited

router = APIRouter(prefix="/v1", tags=["sessions"])
ERRORS = error_answers(401, 404, 409, 413, 422)


@router.post("/sessions", status_code=201, response_model=SessionOut, responses=ERRORS)
def create_session(
    state: State,
    tenant_id: TenantId,
    body: Annotated[CreateSessionRequest | None, Body()] = None,
) -> SessionOut:
    """Create an empty session, linked to ``workspace`` when given. 409 when this tenant
    already has the id or the workspace is itself linked; 404 when the tenant has no such
    workspace; 422 for a session that names itself as its workspace."""
    request = body or CreateSessionRequest()
    info = state.store.create_session(
        tenant_id, request.id, metadata=request.metadata, workspace=request.workspace
    )
    return session_out(info, state.secrets)


@router.put("/sessions/{session_id}/link", response_model=SessionOut, responses=ERRORS)
def link_session(
    state: State, tenant_id: TenantId, session_id: SessionPath, body: LinkRequest
) -> SessionOut:
    """Link the session to a workspace session (the delegation funnel): every observable
    message appended from now on is also appended to the workspace, in the same transaction.
    Messages already stored are not copied. 404 for a missing session or workspace (or
    another tenant's); 409 when the workspace is itself linked or the session is a workspace
    of others; 422 for a link to itself."""
    return session_out(
        state.store.link_session(tenant_id, session_id, body.workspace), state.secrets
    )


@router.delete("/sessions/{session_id}/link", response_model=SessionOut, responses=ERRORS)
def unlink_session(state: State, tenant_id: TenantId, session_id: SessionPath) -> SessionOut:
    """Stop copying the session's messages (copies already made stay). Unlinking an
    unlinked session changes nothing. 404 for a missing session or another tenant's."""
    return session_out(state.store.unlink_session(tenant_id, session_id), state.secrets)


CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,512}$"
"""A listing cursor: URL-safe base64, as the listing hands it out."""


@router.get("/sessions", response_model=SessionsPage, responses=ERRORS)
def list_sessions(
    state: State,
    tenant_id: TenantId,
    limit: Annotated[int, Query(ge=1, le=MAX_SESSIONS_PAGE)] = 50,
    cursor: Annotated[
        str | None, Query(pattern=CURSOR_PATTERN, description="next_cursor of the last page.")
    ] = None,
    updated_since: Annotated[
        datetime | None,
        Query(description="ISO-8601 time; only sessions updated at or after it (naive: UTC)."),
    ] = None,
) -> SessionsPage:
    """The key's tenant's sessions, newest first (by ``created_at``, then id), a page at a
    time: pass ``next_cursor`` back as ``cursor``. Sessions created while paging never shift a
    page. 422 for a ``limit`` out of range, a malformed ``updated_since`` or a cursor this
    listing did not hand out."""
    listing = state.store.list_sessions(
        tenant_id, limit=limit, cursor=cursor, updated_since=updated_since
    )
    secrets = state.secrets
    return SessionsPage(
        sessions=[session_out(info, secrets) for info in listing.sessions],
        next_cursor=listing.next_cursor,
    )


@router.get("/sessions/{session_id}", response_model=SessionOut, responses=ERRORS)
def get_session(state: State, tenant_id: TenantId, session_id: SessionPath) -> SessionOut:
    """The session's leaf, entry count and unobserved tokens. 404 for a missing session or
    another tenant's."""
    return session_out(state.store.get_session(tenant_id, session_id), state.secrets)


def _appended(
    state: ApiState, tenant_id: str, session_id: str, body: AppendEntriesRequest
) -> Response:
    entries = [to_entry(entry, session_id) for entry in body.entries]
    result = state.store.append_entries(tenant_id, session_id, entries)
    answer = AppendEntriesResponse(
        appended_ids=list(result.appended_ids),
        duplicate_ids=list(result.duplicate_ids),
        leaf_id=result.leaf_id,
    )
    return json_answer(answer, status_code=201)


@router.post(
    "/sessions/{session_id}/entries",
    status_code=201,
    response_model=AppendEntriesResponse,
    responses=ERRORS,
)
async def append_entries(
    state: State, tenant_id: TenantId, session_id: SessionPath, body: AppendEntriesRequest
) -> Response:
    """Append 1..1,000 entries atomically, in order; the leaf moves to the last new one.

    Idempotent by entry id: an id already stored with the same content is reported in
    ``duplicate_ids`` and not written twice; with other content the whole batch is a 409 and
    nothing is written. 422: kind/payload mismatch, an id twice in the batch, a parent that is
    not an earlier entry of the session. For a linked session the observable messages are
    copied onto its workspace in the same transaction; 409 when that workspace is gone.
    """
    # The hot path of every agent turn. On a local store (SQLite), with no other call of a
    # turn being served, the write is tried on the event loop, cheaper than the hop, unless
    # another writer holds the file; else, as on a database server, it takes one hop into
    # the write lane, where a sync route took two (the route, then FastAPI's validation of
    # its answer).
    if state.local_store and state.lanes.alone:
        try:
            with writers_not_waited():
                return _appended(state, tenant_id, session_id, body)
        except WritersBusyError:
            pass  # nothing was written: the lane waits for the other writer
    return await state.lanes.write.run(_appended, state, tenant_id, session_id, body)


@router.get("/sessions/{session_id}/entries", response_model=EntriesPage, responses=ERRORS)
def list_entries(
    state: State,
    tenant_id: TenantId,
    session_id: SessionPath,
    after: Annotated[str | None, Query(pattern=ENTRY_ID_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_ENTRIES_PAGE)] = 100,
) -> EntriesPage:
    """Current-branch entries after entry ``after`` (from the root without it), in order.

    Known secrets are redacted from every payload (as in ``/messages`` and ``/context``).
    422 when ``after`` is not an entry on the current branch.
    """
    try:
        page = state.store.read_page(tenant_id, session_id, after=after, limit=limit)
    except EntryNotFoundError as exc:
        # The cursor is input: an unknown one is a bad request, not a missing session.
        raise ApiError(422, "invalid_input", str(exc)) from None
    secrets = state.secrets
    return EntriesPage(
        entries=[entry_out(entry, secrets) for entry in page.entries],
        next_cursor=page.next_cursor,
    )
