"""Export and import of a session: ``GET .../export`` streams it as JSON lines,
``POST .../import`` takes such a file into a session, all or nothing. The format:
:mod:`om_core.portability`; the store's side: :mod:`om_workers.store.portability`."""

from __future__ import annotations

import itertools
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from om_api.schemas import ImportOut
from om_api.server.auth import TenantId, request_key_id
from om_api.server.convert import session_out
from om_api.server.portability import (
    NDJSON,
    check_entry,
    export_lines,
    numbered_lines,
    spool_body,
)
from om_api.server.routes import SessionPath, error_answers
from om_api.server.state import State
from om_core.errors import ObservationalMemoryError

router = APIRouter(prefix="/v1", tags=["portability"])

_EXPORT_ANSWER: dict[int | str, dict[str, Any]] = {
    200: {"content": {NDJSON: {"schema": {"type": "string"}}}}
}
_IMPORT_BODY = {
    "requestBody": {
        "required": True,
        "content": {NDJSON: {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.get(
    "/sessions/{session_id}/export",
    response_class=StreamingResponse,
    responses={**_EXPORT_ANSWER, **error_answers(401, 404)},
)
def export_session(
    request: Request, state: State, tenant_id: TenantId, session_id: SessionPath
) -> Response:
    """The session as JSON lines (``application/x-ndjson``), streamed: a header, the current
    branch's entries root to leaf in the ledger's wire format, the service's records
    (tombstones, memory items, link), an end line with the counts. Secrets are redacted as in
    every read. 404 for a missing session or another tenant's (before anything is sent)."""
    lines = export_lines(state.store.export_session(tenant_id, session_id), state.secrets)
    # The header is read now, so a missing session is a 404 rather than a broken stream.
    first = next(lines)
    state.accounts.record_audit(
        tenant_id, request_key_id(request), "export", session_id, "accepted"
    )
    return StreamingResponse(itertools.chain([first], lines), media_type=NDJSON)


@router.post(
    "/sessions/{session_id}/import",
    status_code=201,
    response_model=ImportOut,
    responses={200: {"model": ImportOut}, **error_answers(401, 409, 413, 422)},
    openapi_extra=_IMPORT_BODY,
)
async def import_session(
    request: Request,
    response: Response,
    state: State,
    tenant_id: TenantId,
    session_id: SessionPath,
) -> ImportOut:
    """Import an export (the body, JSON lines) into the session, in one transaction: 201 when
    the import created it, 200 when the tenant already had it (a repeated import stores
    nothing twice). Ids are kept, so the same file into another tenant or deployment gives the
    same context and recall. 422 naming the first bad line (``line`` in the answer): a line
    cut short, not JSON, an unknown record or ``om.*`` record kind, a duplicate id, a parent
    in neither the file nor the session, what an append refuses; 409 when another session of
    this tenant holds one of the ids; 413 over ``OM_MAX_BODY_BYTES``. Nothing is stored then.
    """
    key_id = request_key_id(request)
    try:
        body = await spool_body(request.stream())
        try:
            result = await run_in_threadpool(
                state.store.import_session,
                tenant_id,
                session_id,
                numbered_lines(body),
                check_entry=check_entry,
            )
        finally:
            body.close()
    except ObservationalMemoryError:
        state.accounts.record_audit(tenant_id, key_id, "import", session_id, "refused")
        raise
    state.accounts.record_audit(tenant_id, key_id, "import", session_id, "succeeded")
    if not result.created:
        response.status_code = 200
    return ImportOut(
        session=session_out(result.session, state.secrets),
        created=result.created,
        imported=result.imported,
        duplicates=result.duplicates,
        tombstones=result.tombstones,
    )
