"""One function per API endpoint, describing its request (:class:`~om_api.client.core.Call`).

Each function is a client method's one home: its signature and docstring are the method's
(:class:`~om_api.client.base.ClientBase` turns it into ``OMClient.<name>`` and
``AsyncOMClient.<name>``), and the sync and async clients send exactly the request it
describes, so an endpoint's path, query, body and result model are written once.

Every argument is checked here first (:mod:`om_api.client.checks`): whatever the API would
refuse and the client can see raises :class:`~om_api.client.core.InvalidRequest` naming the
argument, before any I/O. Paths quote every id too, so an id can never change the route.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, get_args
from urllib.parse import quote

from om_api.client import checks
from om_api.client.core import Call, EntryLike, dump, entry_batches, refused
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
    ErasureTicket,
    FlushRequest,
    FlushTicket,
    HealthOut,
    ImportOut,
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
    SearchPage,
    SessionOut,
    SessionsPage,
    StatusOut,
    TenantOut,
    ViewOut,
)
from om_core.read.context import MIN_CONTEXT_TOKENS
from om_core.read.search import MAX_QUERY_CHARS, MAX_SEARCH_LIMIT

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
    session_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    *,
    workspace: str | None = None,
) -> Call[SessionOut]:
    """Create a session (random id when none), linked to ``workspace`` when given (see
    :meth:`link`). :class:`Conflict` if the id is taken or the workspace is itself
    linked; :class:`NotFound` for a missing workspace."""
    if session_id is not None:
        checks.path_id("session_id", session_id)
    if workspace is not None:
        checks.path_id("workspace", workspace)
    fields = {"metadata": {} if metadata is None else metadata}
    body = checks.model(CreateSessionRequest, id=session_id, workspace=workspace, **fields)
    # Without a caller id a retry after a lost answer would make a second session.
    return Call(
        "POST", "/v1/sessions", SessionOut, json=dump(body), idempotent=session_id is not None
    )


def list_sessions(
    *, limit: int = 50, cursor: str | None = None, updated_since: datetime | str | None = None
) -> Call[SessionsPage]:
    """A page of the key's tenant's sessions, newest first; pass ``next_cursor`` back as
    ``cursor`` for the next page (``None`` after the last). ``updated_since`` (a datetime
    or ISO-8601 text; naive means UTC) keeps sessions updated at or after it.
    :class:`InvalidRequest` for ``limit`` outside 1..100 or a cursor the API did not hand
    out."""
    params: dict[str, Any] = {"limit": checks.int_in("limit", limit, 1, MAX_SESSIONS_PAGE)}
    if cursor is not None:
        if not isinstance(cursor, str) or not cursor:
            raise refused("cursor", "expected the next_cursor of an earlier page")
        params["cursor"] = cursor
    if updated_since is not None:
        params["updated_since"] = checks.timestamp("updated_since", updated_since)
    return Call("GET", "/v1/sessions", SessionsPage, params=params)


def get_session(session_id: str) -> Call[SessionOut]:
    """The session's leaf, entry count and unobserved tokens. :class:`NotFound`."""
    return Call("GET", _session(session_id), SessionOut)


def link(session_id: str, workspace: str) -> Call[SessionOut]:
    """Link a session to a workspace session of the same tenant: every observable message
    appended to it from now on is also appended to the workspace (a new id, and
    ``data["funnelOrigin"]`` naming the original), in the same transaction. Returns the
    session, ``workspace`` set. :class:`NotFound` for a missing session or workspace (or
    another tenant's), :class:`Conflict` when the workspace is itself linked or the
    session is a workspace of others, :class:`InvalidRequest` for a link to itself."""
    body = checks.model(LinkRequest, workspace=checks.path_id("workspace", workspace))
    # Setting the same link again changes nothing: safe to retry.
    return Call("PUT", f"{_session(session_id)}/link", SessionOut, json=body.model_dump())


def unlink(session_id: str) -> Call[SessionOut]:
    """Stop copying a session's messages onto its workspace (copies made stay).
    :class:`NotFound`."""
    return Call("DELETE", f"{_session(session_id)}/link", SessionOut)


def append(session_id: str, entries: Sequence[EntryLike]) -> list[Call[AppendEntriesResponse]]:
    """The requests of an append: ``entries`` with ids, in batches the API accepts
    (:func:`~om_api.client.core.entry_batches`); the clients send them in order."""
    path = f"{_session(session_id)}/entries"
    # Every entry carries an id, so repeating a request appends nothing.
    return [
        Call("POST", path, AppendEntriesResponse, json={"entries": batch})
        for batch in entry_batches(entries)
    ]


def entries(session_id: str, after: str | None = None, limit: int = 100) -> Call[EntriesPage]:
    """Current-branch entries after entry ``after`` (from the start when ``None``)."""
    params: dict[str, Any] = {"limit": checks.int_in("limit", limit, 1, MAX_ENTRIES_PAGE)}
    if after is not None:
        params["after"] = checks.entry_id("after", after)
    return Call("GET", f"{_session(session_id)}/entries", EntriesPage, params=params)


def flush(
    session_id: str, *, force: bool = False, full_reflection_rebuild: bool = False
) -> Call[FlushTicket]:
    """Request a flush; the job id serving it (``coalesced`` when a pending job serves it
    too, or when the request had nothing to do and the session's newest job, in ``state``,
    answers it). :class:`Unavailable` when Redis stays down through the retries."""
    body = checks.model(FlushRequest, force=force, full_reflection_rebuild=full_reflection_rebuild)
    # A repeated flush request coalesces with the pending one: safe to retry.
    return Call("POST", f"{_session(session_id)}/flush", FlushTicket, json=body.model_dump())


def erase_session(session_id: str) -> Call[ErasureTicket]:
    """Erase a session: at once it is gone to the tenant (:class:`NotFound` on every call),
    and a worker deletes it and its traces (funnel copies on workspaces, and the memory those
    derived); the answer names the erasure job (:meth:`wait_for_job`). Asking again answers
    the same job. :class:`NotFound` for a session the tenant never had."""
    # A repeated erasure answers the same job: safe to retry.
    return Call("DELETE", _session(session_id), ErasureTicket)


def erase_subject(subject: str) -> Call[ErasureTicket]:
    """Erase every session whose ``metadata["subject"]`` is ``subject`` (one end user's
    data), as one erasure job."""
    path = f"/v1/subjects/{_q(checks.subject('subject', subject))}"
    # Hiding what is already hidden changes nothing; a retry opens a job with nothing to do.
    return Call("DELETE", path, ErasureTicket)


def job(job_id: str) -> Call[JobOut]:
    """A flush or erasure job's state, timings, counts and redacted error. :class:`NotFound`."""
    return Call("GET", f"/v1/jobs/{_q(checks.path_id('job_id', job_id))}", JobOut)


def context(
    session_id: str,
    *,
    scope: str | None = None,
    include: Include | None = None,
    max_tokens: int | None = None,
) -> Call[ContextOut]:
    """The ``observational-memory`` and ``recent-messages`` blocks for the next turn:
    memory, then every message memory does not cover yet (``unobserved``) and the last
    few, within ``max_tokens`` estimated tokens (the server's default when ``None``).
    ``gap`` names unobserved messages the budget left out, with the cursor to page them
    from. :class:`InvalidRequest` for a budget out of range."""
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
    """What an observation/reflection rests on (``found`` false for an unknown id).
    :class:`InvalidRequest` for a malformed id."""
    memory = _q(checks.memory_id("memory_id", memory_id))
    return Call("GET", f"{_session(session_id)}/memory/{memory}", RecallOut)


def messages(
    session_id: str,
    cursor: str,
    *,
    limit: int = 20,
    direction: Direction = "forward",
    detail: Detail = "summary",
) -> Call[MessagesPage]:
    """A page of messages around message ``cursor`` (``limit`` <= 100)."""
    params = {
        "cursor": checks.entry_id("cursor", cursor),
        "limit": checks.int_in("limit", limit, 1, MAX_MESSAGES_PAGE),
        "direction": checks.choice("direction", direction, get_args(Direction)),
        "detail": checks.choice("detail", detail, get_args(Detail)),
    }
    return Call("GET", f"{_session(session_id)}/messages", MessagesPage, params=params)


def search(
    q: str,
    *,
    session_id: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
    mode: str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> Call[SearchPage]:
    """Full-text search of one session's messages and memory, or of every session of the
    tenant (no ``session_id``): hits best first, ``next_cursor`` for the next page. Any word
    of ``q`` matches; quotes and operators are plain text. ``mode`` ``lexical`` or ``hybrid``
    (full text and vectors fused; the server's embeddings must be on); unset: lexical.
    ``metadata`` narrows a tenant-wide search to the sessions whose metadata holds each key
    with exactly that string value. :class:`InvalidRequest` for an empty ``q``, one over
    ``MAX_QUERY_CHARS`` characters, a ``limit`` outside ``1..MAX_SEARCH_LIMIT``, another
    ``mode``, or ``metadata`` that is not strings or comes with a ``session_id``."""
    if not isinstance(q, str) or not q.strip():
        raise refused("q", "the search query is empty")
    if len(q) > MAX_QUERY_CHARS:
        raise refused("q", f"at most {MAX_QUERY_CHARS} characters")
    params: dict[str, Any] = {"q": q, "limit": checks.int_in("limit", limit, 1, MAX_SEARCH_LIMIT)}
    if cursor is not None:
        params["cursor"] = cursor
    if mode is not None:
        if mode not in ("lexical", "hybrid"):
            raise refused("mode", "lexical or hybrid")
        params["mode"] = mode
    if metadata:
        if session_id is not None:
            raise refused("metadata", "narrows a tenant-wide search, not a session's")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise refused("metadata", "keys and values must be strings")
        params["metadata"] = [f"{key}:{value}" for key, value in metadata.items()]
    path = f"{_session(session_id)}/search" if session_id is not None else "/v1/search"
    return Call("GET", path, SearchPage, params=params)


def status(session_id: str) -> Call[StatusOut]:
    """om:status: memory counts and the rendered status text."""
    return Call("GET", f"{_session(session_id)}/status", StatusOut)


def view(session_id: str, *, full: bool = False) -> Call[ViewOut]:
    """om:view: visible memory, or all active memory with ``full``."""
    params = {"mode": "full" if full else "visible"}
    return Call("GET", f"{_session(session_id)}/view", ViewOut, params=params)


def compact(session_id: str, keep_recent_entries: int = 8) -> Call[EntryOut]:
    """Append a compaction entry summarising the session (not retried on a lost answer)."""
    body = checks.model(CompactRequest, keep_recent_entries=keep_recent_entries)
    # Each call appends a new compaction entry: never repeated blindly.
    path = f"{_session(session_id)}/compact"
    return Call("POST", path, EntryOut, json=body.model_dump(), idempotent=False)


def open_scope(
    session_id: str,
    scope_id: str,
    *,
    parent_id: str | None = None,
    kind: str | None = None,
    label: str | None = None,
) -> Call[ScopeRecordOut]:
    """Open a work scope. :class:`Conflict` when it exists."""
    checks.path_id("scope_id", scope_id)
    if parent_id is not None:
        checks.path_id("parent_id", parent_id)
    body = checks.model(OpenScopeRequest, id=scope_id, parent_id=parent_id, kind=kind, label=label)
    path = f"{_session(session_id)}/scopes"
    return Call("POST", path, ScopeRecordOut, json=dump(body), idempotent=False)


def close_scope(session_id: str, scope_id: str) -> Call[ScopeRecordOut]:
    """Close a work scope."""
    return _scope_action(session_id, scope_id, "close")


def enter_scope(session_id: str, scope_id: str) -> Call[ScopeRecordOut]:
    """Enter a work scope (new entries belong to it)."""
    return _scope_action(session_id, scope_id, "enter")


def leave_scope(session_id: str, scope_id: str) -> Call[ScopeRecordOut]:
    """Leave a work scope."""
    return _scope_action(session_id, scope_id, "leave")


def _scope_action(session_id: str, scope_id: str, action: ScopeAction) -> Call[ScopeRecordOut]:
    return Call("POST", _scope(session_id, scope_id, action), ScopeRecordOut, idempotent=False)


def bind(session_id: str, scope_id: str, refs: Sequence[str]) -> Call[ScopeRecordOut]:
    """Bind ``om:<id>``/``reflection:<id>`` memory to a scope."""
    return _scope_refs(session_id, scope_id, "bind", refs)


def unbind(session_id: str, scope_id: str, refs: Sequence[str]) -> Call[ScopeRecordOut]:
    """Unbind memory references from a scope."""
    return _scope_refs(session_id, scope_id, "unbind", refs)


def _scope_refs(
    session_id: str, scope_id: str, action: Literal["bind", "unbind"], refs: Sequence[str]
) -> Call[ScopeRecordOut]:
    body = checks.model(ScopeRefsRequest, refs=checks.id_list("refs", refs))
    path = _scope(session_id, scope_id, action)
    # Binding what is bound (or unbinding what is not) appends nothing: safe to retry.
    return Call("POST", path, ScopeRecordOut, json=body.model_dump())


def grant(session_id: str, scope_id: str, principals: Sequence[str]) -> Call[ScopeRecordOut]:
    """Share a scope's memory with other sessions of the tenant."""
    return _scope_principals(session_id, scope_id, "grant", principals)


def revoke(session_id: str, scope_id: str, principals: Sequence[str]) -> Call[ScopeRecordOut]:
    """Stop sharing a scope with sessions."""
    return _scope_principals(session_id, scope_id, "revoke", principals)


def _scope_principals(
    session_id: str, scope_id: str, action: Literal["grant", "revoke"], principals: Sequence[str]
) -> Call[ScopeRecordOut]:
    principal_ids = checks.id_list("principals", principals)
    body = checks.model(ScopePrincipalsRequest, principal_ids=principal_ids)
    path = _scope(session_id, scope_id, action)
    return Call("POST", path, ScopeRecordOut, json=body.model_dump())


def revoke_entries(session_id: str, entry_ids: Sequence[str]) -> Call[RevocationOut]:
    """Withhold memory derived from these entries; the observations it dropped."""
    body = checks.model(RevocationRequest, entry_ids=checks.id_list("entry_ids", entry_ids))
    path = f"{_session(session_id)}/revocations"
    return Call("POST", path, RevocationOut, json=body.model_dump())


def healthz() -> Call[HealthOut]:
    """Liveness."""
    return Call("GET", "/healthz", HealthOut)


def readyz() -> Call[HealthOut]:
    """Readiness (Redis and the database); :class:`Unavailable` when not ready."""
    return Call("GET", "/readyz", HealthOut)


def metrics() -> Call[str]:
    """Prometheus metrics text. Needs a client whose key is the service's
    ``OM_METRICS_TOKEN``: :class:`Unauthorized` with a tenant's key, :class:`NotFound` when
    the service serves no metrics on its port."""
    return Call("GET", "/metrics", str)


def create_tenant(tenant_id: str, name: str | None = None) -> Call[TenantOut]:
    """Admin: create a tenant. Needs ``admin_token``; :class:`Conflict` if it exists."""
    checks.path_id("tenant_id", tenant_id)
    body = checks.model(CreateTenantRequest, id=tenant_id, name=name)
    path = "/v1/admin/tenants"
    return Call("POST", path, TenantOut, json=dump(body), idempotent=False, admin=True)


def _tenant_keys(tenant_id: str) -> str:
    return f"/v1/admin/tenants/{_q(checks.path_id('tenant_id', tenant_id))}/keys"


def create_key(tenant_id: str, label: str = "") -> Call[KeyOut]:
    """Admin: a new API key for the tenant (its plaintext is in this answer only)."""
    body = checks.model(CreateKeyRequest, label=label)
    path = _tenant_keys(tenant_id)
    return Call("POST", path, KeyOut, json=body.model_dump(), idempotent=False, admin=True)


def list_keys(tenant_id: str) -> Call[ApiKeysOut]:
    """Admin: the tenant's keys (id, prefix, label, times; never the key), oldest first.
    :class:`NotFound` for an unknown tenant."""
    return Call("GET", _tenant_keys(tenant_id), ApiKeysOut, admin=True)


def revoke_key(key_id: str) -> Call[ApiKeyOut]:
    """Admin: revoke a key by id; every later request with it is a 401 (:class:`Unauthorized`),
    on every API replica. Revoking it again changes nothing. :class:`NotFound`."""
    path = f"/v1/admin/keys/{_q(checks.path_id('key_id', key_id))}/revoke"
    # Revoking a revoked key changes nothing: safe to retry.
    return Call("POST", path, ApiKeyOut, admin=True)


def export_session(session_id: str) -> Call[str]:
    """The session's export (JSON lines); sent by the clients' streaming ``export_session``,
    which writes it to a file as it arrives. :class:`NotFound` for a missing session."""
    return Call("GET", f"{_session(session_id)}/export", str)


def export_tenant(tenant_id: str) -> Call[str]:
    """Admin: every session of a tenant, one export after the other; sent by the clients'
    streaming ``export_tenant``. :class:`NotFound` for an unknown tenant."""
    tenant = _q(checks.path_id("tenant_id", tenant_id))
    return Call("GET", f"/v1/admin/tenants/{tenant}/export", str, admin=True)


def import_session(session_id: str, content: bytes) -> Call[ImportOut]:
    """Import an export (JSON lines, as ``export_session`` wrote it) into the session, all or
    nothing; ``created`` says whether the import created the session. Importing the same
    file again stores nothing twice (so a retry is safe). :class:`InvalidRequest` (422)
    naming the first bad line, :class:`Conflict` when another session of the tenant holds
    one of its ids, :class:`PayloadTooLarge` over the server's body limit."""
    if not isinstance(content, bytes):
        raise refused("content", f"expected bytes, got {type(content).__name__}")
    return Call("POST", f"{_session(session_id)}/import", ImportOut, content=content)
