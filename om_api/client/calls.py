"""One function per API endpoint, describing its request (:class:`~om_api.client.core.Call`).

The sync and async clients send exactly these, so an endpoint's path, query, body and result
model are written once. Paths quote every id, so an id can never change the route.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote

from om_api.client.core import Call
from om_api.schemas import (
    AppendEntriesResponse,
    CompactRequest,
    ContextOut,
    CreateKeyRequest,
    CreateSessionRequest,
    CreateTenantRequest,
    EntriesPage,
    EntryOut,
    FlushAccepted,
    FlushRequest,
    HealthOut,
    JobOut,
    KeyOut,
    MessagesPage,
    OpenScopeRequest,
    RecallOut,
    RevocationOut,
    RevocationRequest,
    ScopePrincipalsRequest,
    ScopeRecordOut,
    ScopeRefsRequest,
    SessionOut,
    StatusOut,
    TenantOut,
    ViewOut,
)

Include = Literal["self", "self+ancestors", "self+descendants", "lineage"]
ScopeAction = Literal["close", "enter", "leave"]


def _q(value: str) -> str:
    return quote(value, safe="")


def _session(session_id: str) -> str:
    return f"/v1/sessions/{_q(session_id)}"


def create_session(session_id: str | None, metadata: Mapping[str, Any] | None) -> Call[SessionOut]:
    body = CreateSessionRequest(id=session_id, metadata=dict(metadata or {}))
    # Without a caller id a retry after a lost answer would make a second session.
    return Call(
        "POST",
        "/v1/sessions",
        SessionOut,
        json=body.model_dump(mode="json", exclude_none=True),
        idempotent=session_id is not None,
    )


def get_session(session_id: str) -> Call[SessionOut]:
    return Call("GET", _session(session_id), SessionOut)


def append(session_id: str, batch: Sequence[Mapping[str, Any]]) -> Call[AppendEntriesResponse]:
    # Every entry carries an id (client_core.entry_batches), so repeating it appends nothing.
    return Call(
        "POST",
        f"{_session(session_id)}/entries",
        AppendEntriesResponse,
        json={"entries": list(batch)},
    )


def entries(session_id: str, after: str | None, limit: int) -> Call[EntriesPage]:
    params: dict[str, Any] = {"limit": limit}
    if after is not None:
        params["after"] = after
    return Call("GET", f"{_session(session_id)}/entries", EntriesPage, params=params)


def flush(session_id: str, force: bool, full_reflection_rebuild: bool) -> Call[FlushAccepted]:
    body = FlushRequest(force=force, full_reflection_rebuild=full_reflection_rebuild)
    # A repeated flush request coalesces with the pending one: safe to retry.
    return Call("POST", f"{_session(session_id)}/flush", FlushAccepted, json=body.model_dump())


def job(job_id: str) -> Call[JobOut]:
    return Call("GET", f"/v1/jobs/{_q(job_id)}", JobOut)


def context(
    session_id: str, scope: str | None, include: Include | None, max_tokens: int | None
) -> Call[ContextOut]:
    params: dict[str, Any] = {}
    if scope is not None:
        params["scope"] = scope
    if include is not None:
        params["include"] = include
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    return Call("GET", f"{_session(session_id)}/context", ContextOut, params=params)


def recall(session_id: str, memory_id: str) -> Call[RecallOut]:
    return Call("GET", f"{_session(session_id)}/memory/{_q(memory_id)}", RecallOut)


def messages(
    session_id: str,
    cursor: str,
    limit: int,
    direction: Literal["forward", "backward"],
    detail: Literal["summary", "full"],
) -> Call[MessagesPage]:
    params = {"cursor": cursor, "limit": limit, "direction": direction, "detail": detail}
    return Call("GET", f"{_session(session_id)}/messages", MessagesPage, params=params)


def status(session_id: str) -> Call[StatusOut]:
    return Call("GET", f"{_session(session_id)}/status", StatusOut)


def view(session_id: str, full: bool) -> Call[ViewOut]:
    params = {"mode": "full" if full else "visible"}
    return Call("GET", f"{_session(session_id)}/view", ViewOut, params=params)


def compact(session_id: str, keep_recent_entries: int) -> Call[EntryOut]:
    body = CompactRequest(keep_recent_entries=keep_recent_entries)
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
    body = OpenScopeRequest(id=scope_id, parent_id=parent_id, kind=kind, label=label)
    return Call(
        "POST",
        f"{_session(session_id)}/scopes",
        ScopeRecordOut,
        json=body.model_dump(mode="json", exclude_none=True),
        idempotent=False,
    )


def scope_action(session_id: str, scope_id: str, action: ScopeAction) -> Call[ScopeRecordOut]:
    path = f"{_session(session_id)}/scopes/{_q(scope_id)}/{action}"
    return Call("POST", path, ScopeRecordOut, idempotent=False)


def scope_refs(
    session_id: str, scope_id: str, action: Literal["bind", "unbind"], refs: Sequence[str]
) -> Call[ScopeRecordOut]:
    body = ScopeRefsRequest(refs=list(refs))
    path = f"{_session(session_id)}/scopes/{_q(scope_id)}/{action}"
    # Binding what is bound (or unbinding what is not) appends nothing: safe to retry.
    return Call("POST", path, ScopeRecordOut, json=body.model_dump())


def scope_principals(
    session_id: str, scope_id: str, action: Literal["grant", "revoke"], principals: Sequence[str]
) -> Call[ScopeRecordOut]:
    body = ScopePrincipalsRequest(principal_ids=list(principals))
    path = f"{_session(session_id)}/scopes/{_q(scope_id)}/{action}"
    return Call("POST", path, ScopeRecordOut, json=body.model_dump())


def revoke_entries(session_id: str, entry_ids: Sequence[str]) -> Call[RevocationOut]:
    body = RevocationRequest(entry_ids=list(entry_ids))
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
    body = CreateTenantRequest(id=tenant_id, name=name)
    return Call(
        "POST",
        "/v1/admin/tenants",
        TenantOut,
        json=body.model_dump(mode="json", exclude_none=True),
        idempotent=False,
        admin=True,
    )


def create_key(tenant_id: str, label: str) -> Call[KeyOut]:
    body = CreateKeyRequest(label=label)
    path = f"/v1/admin/tenants/{_q(tenant_id)}/keys"
    return Call("POST", path, KeyOut, json=body.model_dump(), idempotent=False, admin=True)
