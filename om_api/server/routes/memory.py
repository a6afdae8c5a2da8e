"""Reads of a session's memory: context blocks, exact-id recall, message paging, status, view;
and compaction, which appends the strategy's compaction entry."""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Query
from fastapi.responses import Response

from om_api.schemas import (
    ENTRY_ID_PATTERN,
    MAX_CONTEXT_TOKENS,
    MAX_MESSAGES_PAGE,
    SCOPE_ID_PATTERN,
    CompactRequest,
    ContextOut,
    EntryOut,
    MessagesPage,
    RecallOut,
    StatusOut,
    ViewOut,
)
from om_api.server.auth import TenantId
from om_api.server.convert import context_out, entry_out, json_answer
from om_api.server.errors import ApiError
from om_api.server.routes import MemoryPath, SessionPath, error_answers
from om_api.server.state import ApiState, State
from om_core import (
    RecallResult,
)
from om_core.errors import UnknownScopeError
from om_core.ledger.ids import create_memory_id
from om_core.read.context import MIN_CONTEXT_TOKENS, Context
from om_workers.coordination.coalesce import flush_pending
from om_workers.errors import CoordinationError, OMWorkersError
from om_workers.jobs.requests import request_flush
from om_workers.reads import (
    ContextBuild,
    read_context,
    session_compaction,
    session_page,
    session_recall,
    session_status,
    session_view,
)

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["memory"])
ERRORS = error_answers(401, 404, 422)
IncludeMode = Literal["self", "self+ancestors", "self+descendants", "lineage"]


def _read(
    state: ApiState,
    tenant_id: str,
    session_id: str,
    scope: str | None,
    include: IncludeMode,
    max_tokens: int | None,
) -> Context | ContextBuild:
    # The snapshot ledger plus the branch tail (and the session's tombstones), in one read
    # transaction: a long session is never read whole.
    return read_context(
        state.store,
        tenant_id,
        session_id,
        settings=state.memory_settings,
        scope=scope,
        include=include,
        secrets=state.secrets,
        max_tokens=max_tokens,
    )


def _built(found: Context | ContextBuild) -> Context:
    try:
        return found if isinstance(found, Context) else found()
    except UnknownScopeError as exc:
        raise ApiError(422, "invalid_input", str(exc)) from None


def _context(
    state: ApiState,
    tenant_id: str,
    session_id: str,
    scope: str | None,
    include: IncludeMode,
    max_tokens: int | None,
) -> Context:
    return _built(_read(state, tenant_id, session_id, scope, include, max_tokens))


def _needs_flush(context: Context) -> tuple[bool, bool]:
    """Whether the context asks for a flush (messages it had to leave out), and whether that
    flush should reflect (observations no reflection covers yet were left out of memory)."""
    reflect = context.omitted is not None and context.omitted.unreflected > 0
    return context.gap is not None or reflect, reflect


def _observe_gap(
    state: ApiState, tenant_id: str, session_id: str, *, reflect: bool = False
) -> None:
    """Ask for a flush of messages a context had to leave out (best effort: the reconciler
    requests it too once their tokens pass the threshold); with ``reflect``, a flush that
    also reflects over memory the block had to leave out, below the reflection threshold
    too, so the next context shows it condensed."""
    try:
        request_flush(
            state.store,
            state.redis,
            tenant_id,
            session_id,
            publish=state.publisher(),
            force=True,
            full_reflection_rebuild=reflect,
        )
    except OMWorkersError as exc:
        log.warning("could not request a flush for %s/%s: %s", tenant_id, session_id, exc)


def _recall(state: ApiState, tenant_id: str, session_id: str, memory_id: str) -> RecallResult:
    # Reads only the branch span the record's sources cover.
    return session_recall(
        state.store,
        tenant_id,
        session_id,
        memory_id,
        secrets=state.secrets,
        invalidated_ids=state.invalidated_ids(tenant_id, session_id),
    )


def _budget(state: ApiState, max_tokens: int | None) -> int:
    return max_tokens if max_tokens is not None else state.settings.api.context_max_tokens


def context_answer(
    state: ApiState,
    tenant_id: str,
    session_id: str,
    scope: str | None,
    include: IncludeMode,
    max_tokens: int | None,
) -> ContextOut:
    """What ``GET .../context`` answers (see :func:`context`), flush request for a gap
    included. Blocking: reads the store (and Redis for a gap). Raises the store's errors and a
    422 :class:`ApiError` for a scope the session never opened."""
    result = _context(state, tenant_id, session_id, scope, include, _budget(state, max_tokens))
    wanted, reflect = _needs_flush(result)
    if wanted:
        _observe_gap(state, tenant_id, session_id, reflect=reflect)
    return context_out(result)


async def _served_context(
    state: ApiState,
    tenant_id: str,
    session_id: str,
    scope: str | None,
    include: IncludeMode,
    max_tokens: int | None,
) -> Context:
    """The context, read where it costs least. A local store (SQLite) is read on the event
    loop: each SQLite call in a thread gives up the GIL and takes it back from a busy event
    loop, which cost more than the read itself; a build with the memory part kept (fitting,
    about a millisecond) is done there too, and only a cold one (rendering the whole memory,
    which grows with the session) goes to the read lane. A database server is read in the
    read lane, build included."""
    budget = _budget(state, max_tokens)
    if not state.local_store:
        return await state.lanes.read.run(
            _context, state, tenant_id, session_id, scope, include, budget
        )
    found = _read(state, tenant_id, session_id, scope, include, budget)
    if isinstance(found, Context) or found.warm:
        return _built(found)
    return await state.lanes.read.run(_built, found)


@router.get("/context", response_model=ContextOut, responses=ERRORS)
async def context(
    state: State,
    tenant_id: TenantId,
    session_id: SessionPath,
    scope: Annotated[str | None, Query(pattern=SCOPE_ID_PATTERN)] = None,
    include: IncludeMode = "self+ancestors",
    max_tokens: Annotated[int | None, Query(ge=MIN_CONTEXT_TOKENS, le=MAX_CONTEXT_TOKENS)] = None,
) -> Response:
    """The two context blocks for the next provider turn: ``observational-memory`` (rendered
    for ``scope``, default the current leaf scope, with ``include``) and ``recent-messages``
    (every message memory does not cover yet and at least the last
    ``context.recentMessages``, with the exact entry ids it shows), within ``max_tokens``
    estimated tokens (default ``OM_CONTEXT_MAX_TOKENS``). Unobserved messages the budget left
    out are named in ``gap`` and a flush is requested for them. Memory items the budget left
    out of the memory block are listed by id in its note; when some are observations no
    reflection has gone over yet, a flush with reflection is requested. 422 for a scope the
    session never opened or a budget out of range."""
    # Read before every agent turn: at most one hop into the read lane, where a sync route
    # took two (the route, then FastAPI's validation of its answer).
    result = await _served_context(state, tenant_id, session_id, scope, include, max_tokens)
    wanted, reflect = _needs_flush(result)
    if wanted:
        await state.lanes.write.run(_observe_gap, state, tenant_id, session_id, reflect=reflect)
    return json_answer(context_out(result))


@router.get("/memory/{memory_id}", response_model=RecallOut, responses=ERRORS)
def recall(
    state: State, tenant_id: TenantId, session_id: SessionPath, memory_id: MemoryPath
) -> RecallOut:
    """Exact-id recall of an observation or reflection: its sources and supporting ids.

    An unknown id is a 200 with ``found: false, reason: not_found`` (the core's answer); a
    revoked one ``reason: revoked`` without derived text. 422 for a malformed id.
    """
    result = _recall(state, tenant_id, session_id, memory_id)
    return RecallOut.model_validate(result.model_dump(mode="json"))


@router.get("/messages", response_model=MessagesPage, responses=ERRORS)
def messages(
    state: State,
    tenant_id: TenantId,
    session_id: SessionPath,
    cursor: Annotated[str, Query(pattern=ENTRY_ID_PATTERN)],
    limit: Annotated[int, Query(ge=1, le=MAX_MESSAGES_PAGE)] = 20,
    direction: Literal["forward", "backward"] = "forward",
    detail: Literal["summary", "full"] = "summary",
) -> MessagesPage:
    """Current-branch user/assistant/tool messages after or before message ``cursor``.

    422 when the cursor is not on the current branch or is not a message.
    """
    page = session_page(
        state.store,
        tenant_id,
        session_id,
        cursor,
        limit=limit,
        direction=direction,
        detail=detail,
        secrets=state.secrets,
    )
    return MessagesPage.model_validate(page.model_dump(mode="json"))


def _in_flight(state: ApiState, tenant_id: str, session_id: str) -> bool:
    # Advisory only: a status read must not fail because Redis is briefly away.
    try:
        return flush_pending(state.redis, tenant_id, session_id)
    except CoordinationError:
        return False


@router.get("/status", response_model=StatusOut, responses=ERRORS)
def status(state: State, tenant_id: TenantId, session_id: SessionPath) -> StatusOut:
    """om:status: recorded, dropped, active and visible memory counts (session-local), whether
    a flush is pending, and the rendered status text."""
    result = session_status(
        state.store,
        tenant_id,
        session_id,
        settings=state.memory_settings,
        invalidated_ids=state.invalidated_ids(tenant_id, session_id),
        in_flight=_in_flight(state, tenant_id, session_id),
    )
    return StatusOut(**result.model_dump(), text=result.render())


@router.get("/view", response_model=ViewOut, responses=ERRORS)
def view(
    state: State,
    tenant_id: TenantId,
    session_id: SessionPath,
    mode: Literal["visible", "full"] = "visible",
) -> ViewOut:
    """om:view: the memory the next context shows (``visible``) or all active memory
    (``full``)."""
    text = session_view(
        state.store,
        tenant_id,
        session_id,
        mode,
        settings=state.memory_settings,
        invalidated_ids=state.invalidated_ids(tenant_id, session_id),
        secrets=state.secrets,
    )
    return ViewOut(mode=mode, text=text)


@router.post("/compact", status_code=201, response_model=EntryOut, responses=ERRORS)
def compact(
    state: State,
    tenant_id: TenantId,
    session_id: SessionPath,
    body: Annotated[CompactRequest | None, Body()] = None,
) -> EntryOut:
    """Append a compaction entry (the memory rendered as summary, the folded ledger in
    ``data.memory``, the last ``keep_recent_entries`` messages kept) and return it.

    No model call. 422 when the memory cannot fit the folded-payload cap.
    """
    request = body or CompactRequest()
    result = session_compaction(
        state.store,
        tenant_id,
        session_id,
        request.keep_recent_entries,
        settings=state.memory_settings,
        invalidated_ids=state.invalidated_ids(tenant_id, session_id),
        secrets=state.secrets,
    )
    # parent_id None: the store appends at the leaf as it is at write time, so a concurrent
    # append is never forked off (the entry's ``through_entry_id`` says what it covers).
    entry = result.to_entry(entry_id=create_memory_id(), session_id=session_id, parent_id=None)
    stored = state.store.append_entries(tenant_id, session_id, [entry])
    return entry_out(stored.entries[0])
