"""The console's read pages for one tenant: sessions, a session, a recall, the raw branch, a
job. Each checks the viewer may see the tenant in the URL first (a 404 like a missing session
otherwise), then reads through :mod:`om_api.server.console.views`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Annotated, Final

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from om_api.schemas import ENTRY_ID_PATTERN, JobOut
from om_api.server.console.guard import guarded, visible_tenant
from om_api.server.console.render import page
from om_api.server.console.signin import CurrentViewer
from om_api.server.console.views import (
    EntryRow,
    entries,
    entry_row,
    recall,
    redacted,
    session_page,
)
from om_api.server.convert import erasure_job_out, job_out
from om_api.server.errors import ApiError
from om_api.server.routes import JobPath, MemoryPath, SessionPath, TenantPath
from om_api.server.routes.sessions import CURSOR_PATTERN
from om_api.server.state import ApiState, State
from om_core.ledger.models import SessionEntry
from om_core.policy.redaction import normalize_secrets, redact_value
from om_workers.errors import EntryNotFoundError, FlushJobNotFoundError
from om_workers.store import SessionInfo

router = APIRouter(prefix="/console/tenants/{tenant_id}", include_in_schema=False)

SESSIONS_PAGE: Final = 50
"""Sessions a listing page shows."""
SEARCH_SCAN: Final = 1000
"""Sessions one search page looks through (newest first); the next continues after them."""
MAX_QUERY_CHARS: Final = 200
"""The longest search text; a longer one is refused (422)."""


def _matches(info: SessionInfo, needle: str, secrets: tuple[str, ...]) -> bool:
    metadata = json.dumps(redact_value(dict(info.metadata), secrets), ensure_ascii=False)
    return needle in info.id.lower() or needle in metadata.lower()


def _search(
    state: ApiState, tenant_id: str, query: str, cursor: str | None
) -> tuple[list[SessionInfo], str | None]:
    """Sessions whose id or (redacted) metadata holds ``query``, case-insensitive, among the
    next :data:`SEARCH_SCAN` sessions after ``cursor``; and where the next scan starts."""
    secrets = normalize_secrets(state.secrets)
    needle, found, scanned = query.lower(), [], 0
    while scanned < SEARCH_SCAN:
        listing = state.store.list_sessions(tenant_id, limit=100, cursor=cursor)
        scanned += len(listing.sessions)
        found += [s for s in listing.sessions if _matches(s, needle, secrets)]
        cursor = listing.next_cursor
        if cursor is None:
            break
    return found, cursor


@router.get("/sessions", response_class=HTMLResponse)
@guarded
def sessions(
    state: State,
    viewer: CurrentViewer,
    tenant_id: TenantPath,
    q: Annotated[str, Query(max_length=MAX_QUERY_CHARS)] = "",
    cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN)] = None,
) -> HTMLResponse:
    """The tenant's sessions, newest first, paged; with ``q``, those whose id or metadata
    holds it."""
    visible_tenant(state, viewer, tenant_id)
    query = q.strip()
    if query:
        found, next_cursor = _search(state, tenant_id, query, cursor)
    else:
        listing = state.store.list_sessions(tenant_id, limit=SESSIONS_PAGE, cursor=cursor)
        found, next_cursor = list(listing.sessions), listing.next_cursor
    secrets = normalize_secrets(state.secrets)
    rows = [(s, redact_value(dict(s.metadata), secrets)) for s in found]
    return page(
        "sessions.html",
        viewer=viewer,
        tenant_id=tenant_id,
        rows=rows,
        query=redacted(query, secrets),
        next_cursor=next_cursor,
        scan=SEARCH_SCAN,
    )


@router.get("/sessions/{session_id}", response_class=HTMLResponse)
@guarded
def session(
    state: State,
    viewer: CurrentViewer,
    tenant_id: TenantPath,
    session_id: SessionPath,
    memory: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> HTMLResponse:
    """One session: context blocks, memory with recall links, scopes, funnel links, jobs."""
    visible_tenant(state, viewer, tenant_id)
    view = session_page(state, tenant_id, session_id, memory_offset=memory)
    return page("session.html", viewer=viewer, tenant_id=tenant_id, view=view)


@router.get("/sessions/{session_id}/memory/{memory_id}", response_class=HTMLResponse)
@guarded
def memory_item(
    state: State,
    viewer: CurrentViewer,
    tenant_id: TenantPath,
    session_id: SessionPath,
    memory_id: MemoryPath,
) -> HTMLResponse:
    """Recall of one observation or reflection: its text and its source messages, each
    linked to its place in the raw branch."""
    visible_tenant(state, viewer, tenant_id)
    result = recall(state, tenant_id, session_id, memory_id)
    return page(
        "recall.html",
        viewer=viewer,
        tenant_id=tenant_id,
        session_id=session_id,
        result=result,
        rows=_source_rows(state, result.sources),
    )


def _source_rows(state: ApiState, sources: Iterable[SessionEntry]) -> list[EntryRow]:
    secrets = normalize_secrets(state.secrets)
    return [entry_row(s, secrets) for s in sources]


@router.get("/sessions/{session_id}/entries", response_class=HTMLResponse)
@guarded
def branch(
    state: State,
    viewer: CurrentViewer,
    tenant_id: TenantPath,
    session_id: SessionPath,
    after: Annotated[str | None, Query(pattern=ENTRY_ID_PATTERN)] = None,
    at: Annotated[str | None, Query(pattern=ENTRY_ID_PATTERN)] = None,
) -> HTMLResponse:
    """The raw current branch, a page at a time from ``after`` (the root without it);
    ``at`` marks the entry a recall link pointed at."""
    visible_tenant(state, viewer, tenant_id)
    info = state.store.get_session(tenant_id, session_id)
    try:
        rows, next_cursor = entries(state, tenant_id, session_id, after)
    except EntryNotFoundError as exc:
        raise ApiError(422, "invalid_input", str(exc)) from None
    return page(
        "entries.html",
        viewer=viewer,
        tenant_id=tenant_id,
        info=info,
        rows=rows,
        after=after,
        at=at,
        next_cursor=next_cursor,
    )


def _job(state: ApiState, tenant_id: str, job_id: str) -> JobOut:
    secrets = state.secrets
    try:
        job = state.store.get_job(tenant_id, job_id)
    except FlushJobNotFoundError:
        erasure = state.store.erasure.get_job(tenant_id, job_id)
        return erasure_job_out(erasure, redacted(erasure.error, secrets) or None)
    return job_out(job, redacted(job.error, secrets) or None)


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
@guarded
def job(
    state: State, viewer: CurrentViewer, tenant_id: TenantPath, job_id: JobPath
) -> HTMLResponse:
    """A flush or erasure job: state, timings, attempts, counts, reason, redacted error; the
    page reloads itself every 2 s until the job is final."""
    visible_tenant(state, viewer, tenant_id)
    out = _job(state, tenant_id, job_id)
    final = out.state in {"succeeded", "failed", "skipped"}
    return page("job.html", viewer=viewer, tenant_id=tenant_id, job=out, final=final)
