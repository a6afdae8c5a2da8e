"""One function per API endpoint, describing its request (:class:`~om_api.client.core.Call`).

The sync and async clients send exactly these, so an endpoint's path, query, body and result
model are written once. Every argument is checked here first (:mod:`om_api.client.checks`):
whatever the API would refuse and the client can see raises
:class:`~om_api.client.core.InvalidRequest` naming the argument, before any I/O. Paths quote
every id too, so an id can never change the route.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, get_args
from urllib.parse import quote

from om_api.client import checks
from om_api.client.core import Call, refused
from om_api.schemas import (
    MAX_CONTEXT_TOKENS,
    MAX_ENTRIES_PAGE,
    MAX_MESSAGES_PAGE,
    MAX_SESSIONS_PAGE,
    ApiKeyOut,
    ApiKeysOut,
    AppendEntriesResponse,
    CompactRequest,
    ContextOut,
    CreateKeyRequest,
    CreateSessionRequest,
    CreateTenantRequest,
    EntriesPage,
    EntryOut,
    FlushRequest,
    FlushTicket,
    HealthOut,
    JobOut,
    KeyOut,
    LinkRequest,
    MessagesPage,
    OpenScopeRequest,
    RecallOut,
    RevocationOut,
    RevocationRequest,
    ScopePrincipalsRequest,
    ScopeRecordOut,
    ScopeRefsRequest,
    SessionOut,
    SessionsPage,
    StatusOut,
    TenantOut,
    ViewOut,
)
from om_core.read.context import MIN_CONTEXT_TOKENS

Include = Literal["self", "self+ancestors", "self+descendants", "lineage"]
Direction = Literal["forward", "backward"]
Detail = Literal["summary", "full"]
ScopeAction = Literal["close", "enter", "leave"]


def _q(value: str) -> str:
    return quote(value, safe="")


def _session(session_id: str) -> str:
    return f"/v1/sessions/{_q(checks.path_id('session_id', session_id))}"


def _scope(session_id: str, scope_id: str, action: str) -> str:
    scope = _q(checks.path_id("scope_id", scope_id))
    return f"{_session(session_id)}/scopes/{scope}/{action}"


def create_session(
    session_id: str | None, metadata: Mapping[str, Any] | None, workspace: str | None = None
) -> Call[SessionOut]:
    if session_id is not None:
        checks.path_id("session_id", session_id)
    if workspace is not None:
        checks.path_id("workspace", workspace)
    fields = {"metadata": {} if metadata is None else metadata}
    body = checks.model(CreateSessionRequest, id=session_id, workspace=workspace, **fields)
    # Without a caller id a retry after a lost answer would make a second session.
    return Call(
        "POST",
        "/v1/sessions",
        SessionOut,
        json=body.model_dump(mode="json", exclude_none=True),
        idempotent=session_id is not None,
    )


def list_sessions(
    limit: int, cursor: str | None, updated_since: datetime | str | None
) -> Call[SessionsPage]:
    params: dict[str, Any] = {"limit": checks.int_in("limit", limit, 1, MAX_SESSIONS_PAGE)}
    if cursor is not None:
        if not isinstance(cursor, str) or not cursor:
            raise refused("cursor", "expected the next_cursor of an earlier page")
        params["cursor"] = cursor
    if updated_since is not None:
        params["updated_since"] = checks.timestamp("updated_since", updated_since)
    return Call("GET", "/v1/sessions", SessionsPage, params=params)


def get_session(session_id: str) -> Call[SessionOut]:
    return Call("GET", _session(session_id), SessionOut)


def link(session_id: str, workspace: str) -> Call[SessionOut]:
    body = checks.model(LinkRequest, workspace=checks.path_id("workspace", workspace))
    # Setting the same link again changes nothing: safe to retry.
    return Call("PUT", f"{_session(session_id)}/link", SessionOut, json=body.model_dump())


def unlink(session_id: str) -> Call[SessionOut]:
    return Call("DELETE", f"{_session(session_id)}/link", SessionOut)


def append(session_id: str, batch: Sequence[Mapping[str, Any]]) -> Call[AppendEntriesResponse]:
    # Every entry carries an id (client_core.entry_batches), so repeating it appends nothing.
    return Call(
        "POST",
        f"{_session(session_id)}/entries",
        AppendEntriesResponse,
        json={"entries": list(batch)},
    )


def entries(session_id: str, after: str | None, limit: int) -> Call[EntriesPage]:
    params: dict[str, Any] = {"limit": checks.int_in("limit", limit, 1, MAX_ENTRIES_PAGE)}
    if after is not None:
        params["after"] = checks.entry_id("after", after)
    return Call("GET", f"{_session(session_id)}/entries", EntriesPage, params=params)


def flush(session_id: str, force: bool, full_reflection_rebuild: bool) -> Call[FlushTicket]:
    body = checks.model(FlushRequest, force=force, full_reflection_rebuild=full_reflection_rebuild)
    # A repeated flush request coalesces with the pending one: safe to retry.
    return Call("POST", f"{_session(session_id)}/flush", FlushTicket, json=body.model_dump())


def job(job_id: str) -> Call[JobOut]:
    return Call("GET", f"/v1/jobs/{_q(checks.path_id('job_id', job_id))}", JobOut)


def context(
    session_id: str, scope: str | None, include: Include | None, max_tokens: int | None
) -> Call[ContextOut]:
    params: dict[str, Any] = {}
    if scope is not None:
        params["scope"] = checks.path_id("scope", scope)
    if include is not None:
        params["include"] = checks.choice("include", include, get_args(Include))
    if max_tokens is not None:
        params["max_tokens"] = checks.int_in(
            "max_tokens", max_tokens, MIN_CONTEXT_TOKENS, MAX_CONTEXT_TOKENS
        )
    return Call("GET", f"{_session(session_id)}/context", ContextOut, params=params)


def recall(session_id: str, memory_id: str) -> Call[RecallOut]:
    memory = _q(checks.memory_id("memory_id", memory_id))
    return Call("GET", f"{_session(session_id)}/memory/{memory}", RecallOut)


def messages(
    session_id: str, cursor: str, limit: int, direction: Direction, detail: Detail
) -> Call[MessagesPage]:
    params = {
        "cursor": checks.entry_id("cursor", cursor),
        "limit": checks.int_in("limit", limit, 1, MAX_MESSAGES_PAGE),
        "direction": checks.choice("direction", direction, get_args(Direction)),
        "detail": checks.choice("detail", detail, get_args(Detail)),
    }
    return Call("GET", f"{_session(session_id)}/messages", MessagesPage, params=params)


def status(session_id: str) -> Call[StatusOut]:
    return Call("GET", f"{_session(session_id)}/status", StatusOut)


def view(session_id: str, full: bool) -> Call[ViewOut]:
    params = {"mode": "full" if full else "visible"}
    return Call("GET", f"{_session(session_id)}/view", ViewOut, params=params)


def compact(session_id: str, keep_recent_entries: int) -> Call[EntryOut]:
    body = checks.model(CompactRequest, keep_recent_entries=keep_recent_entries)
    # Each call appends a new compaction entry: never repeated blindly.
    return Call(
        "POST",
        f"{_session(session_id)}/compact",
        EntryOut,
        json=body.model_dump(),
        idempotent=False,
    )


def open_scope(
    session_id: str, scope_id: str, parent_id: str | None, kind: str | None, label: str | None
) -> Call[ScopeRecordOut]:
    checks.path_id("scope_id", scope_id)
    if parent_id is not None:
        checks.path_id("parent_id", parent_id)
    body = checks.model(OpenScopeRequest, id=scope_id, parent_id=parent_id, kind=kind, label=label)
    return Call(
        "POST",
        f"{_session(session_id)}/scopes",
        ScopeRecordOut,
        json=body.model_dump(mode="json", exclude_none=True),
        idempotent=False,
    )


def scope_action(session_id: str, scope_id: str, action: ScopeAction) -> Call[ScopeRecordOut]:
    return Call("POST", _scope(session_id, scope_id, action), ScopeRecordOut, idempotent=False)


def scope_refs(
    session_id: str, scope_id: str, action: Literal["bind", "unbind"], refs: Sequence[str]
) -> Call[ScopeRecordOut]:
    body = checks.model(ScopeRefsRequest, refs=checks.id_list("refs", refs))
    path = _scope(session_id, scope_id, action)
    # Binding what is bound (or unbinding what is not) appends nothing: safe to retry.
    return Call("POST", path, ScopeRecordOut, json=body.model_dump())


def scope_principals(
    session_id: str, scope_id: str, action: Literal["grant", "revoke"], principals: Sequence[str]
) -> Call[ScopeRecordOut]:
    principal_ids = checks.id_list("principals", principals)
    body = checks.model(ScopePrincipalsRequest, principal_ids=principal_ids)
    path = _scope(session_id, scope_id, action)
    return Call("POST", path, ScopeRecordOut, json=body.model_dump())


def revoke_entries(session_id: str, entry_ids: Sequence[str]) -> Call[RevocationOut]:
    body = checks.model(RevocationRequest, entry_ids=checks.id_list("entry_ids", entry_ids))
    return Call(
        "POST", f"{_session(session_id)}/revocations", RevocationOut, json=body.model_dump()
    )


def healthz() -> Call[HealthOut]:
    return Call("GET", "/healthz", HealthOut)


def readyz() -> Call[HealthOut]:
    return Call("GET", "/readyz", HealthOut)


def metrics() -> Call[str]:
    return Call("GET", "/metrics", str)


def create_tenant(tenant_id: str, name: str | None) -> Call[TenantOut]:
    checks.path_id("tenant_id", tenant_id)
    body = checks.model(CreateTenantRequest, id=tenant_id, name=name)
    return Call(
        "POST",
        "/v1/admin/tenants",
        TenantOut,
        json=body.model_dump(mode="json", exclude_none=True),
        idempotent=False,
        admin=True,
    )


def _tenant_keys(tenant_id: str) -> str:
    return f"/v1/admin/tenants/{_q(checks.path_id('tenant_id', tenant_id))}/keys"


def create_key(tenant_id: str, label: str) -> Call[KeyOut]:
    body = checks.model(CreateKeyRequest, label=label)
    path = _tenant_keys(tenant_id)
    return Call("POST", path, KeyOut, json=body.model_dump(), idempotent=False, admin=True)


def list_keys(tenant_id: str) -> Call[ApiKeysOut]:
    return Call("GET", _tenant_keys(tenant_id), ApiKeysOut, admin=True)


def revoke_key(key_id: str) -> Call[ApiKeyOut]:
    path = f"/v1/admin/keys/{_q(checks.path_id('key_id', key_id))}/revoke"
    # Revoking a revoked key changes nothing: safe to retry.
    return Call("POST", path, ApiKeyOut, admin=True)
