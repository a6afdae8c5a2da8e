"""The synchronous Python client of the om HTTP API, :class:`OMClient`; its asynchronous twin,
:class:`~om_api.client.aio.AsyncOMClient`, has the same methods (re-exported here).

An agent server's whole integration::

    with OMClient("http://127.0.0.1:8000", api_key) as om:
        om.append(session_id, run_messages)      # the job's messages (ids make it idempotent)
        om.flush(session_id)                     # 202: observe/reflect in the background
        blocks = om.context(session_id).blocks   # before the next turn

Every method returns the API's pydantic wire model (:mod:`om_api.schemas`) and raises one of
the :class:`OMClientError` subclasses (see :mod:`om_api.client.core`). 503s and dropped
connections are retried with exponential backoff and full jitter, honouring ``Retry-After``
(see :class:`RetryPolicy`); other failures raise at once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

import httpx

from om_api.client import calls
from om_api.client.aio import AsyncOMClient
from om_api.client.calls import Include
from om_api.client.core import (
    DEFAULT_TIMEOUT_S,
    FINAL_JOB_STATES,
    POLL,
    Call,
    Conflict,
    EntryLike,
    InvalidRequest,
    InvalidResponse,
    JobTimeout,
    NotFound,
    OMClientError,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
    auth_headers,
    decode,
    entry_batches,
    merge_appends,
    retry_after_s,
    retry_wait_s,
    should_retry,
    transport_error,
    was_sent,
)
from om_api.schemas import (
    ApiKeyOut,
    ApiKeysOut,
    AppendEntriesResponse,
    ContextOut,
    EntriesPage,
    EntryOut,
    FlushTicket,
    HealthOut,
    JobOut,
    KeyOut,
    MessagesPage,
    RecallOut,
    RevocationOut,
    ScopeRecordOut,
    SessionOut,
    SessionsPage,
    StatusOut,
    TenantOut,
    ViewOut,
)
from om_core.policy.backoff import RetryPolicy, backoff_delay_s

__all__ = [
    "AsyncOMClient",
    "Conflict",
    "InvalidRequest",
    "InvalidResponse",
    "JobTimeout",
    "NotFound",
    "OMClient",
    "OMClientError",
    "PayloadTooLarge",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "Unauthorized",
    "Unavailable",
]

T = TypeVar("T")


class OMClient:
    """Synchronous client. ``base_url`` is the API root (``http://127.0.0.1:8000``); ``api_key``
    the tenant's key; ``admin_token`` (``OM_ADMIN_TOKEN``) only for the admin methods.

    Thread-safe like the ``httpx.Client`` under it; close it (or use ``with``) when done.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        admin_token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._api_key = api_key
        self._admin_token = admin_token
        self._retry = retry or RetryPolicy()
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), timeout=timeout_s, transport=transport
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def send(self, call: Call[T]) -> T:
        """Send one request with retries; the parsed result or a typed error."""
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._http.request(
                    call.method,
                    call.path,
                    params=dict(call.params),
                    json=call.json,
                    headers=auth_headers(self._api_key, self._admin_token, call),
                )
            except httpx.TransportError as exc:
                wait = None
                if should_retry(call, None, was_sent(exc)):
                    wait = retry_wait_s(self._retry, attempt, None)
                if wait is None:
                    raise transport_error(call, exc) from exc
            else:
                code = response.status_code
                wait = None
                if code >= 400 and should_retry(call, code, True):
                    wait = retry_wait_s(self._retry, attempt, retry_after_s(response))
                if wait is None:
                    return decode(call, response)
            time.sleep(wait)

    # Sessions and entries ------------------------------------------------------------------

    def create_session(
        self,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        workspace: str | None = None,
    ) -> SessionOut:
        """Create a session (random id when none), linked to ``workspace`` when given (see
        :meth:`link`). :class:`Conflict` if the id is taken or the workspace is itself
        linked; :class:`NotFound` for a missing workspace."""
        return self.send(calls.create_session(session_id, metadata, workspace))

    def link(self, session_id: str, workspace: str) -> SessionOut:
        """Link a session to a workspace session of the same tenant: every observable message
        appended to it from now on is also appended to the workspace (a new id, and
        ``data["funnelOrigin"]`` naming the original), in the same transaction. Returns the
        session, ``workspace`` set. :class:`NotFound` for a missing session or workspace (or
        another tenant's), :class:`Conflict` when the workspace is itself linked or the
        session is a workspace of others, :class:`InvalidRequest` for a link to itself."""
        return self.send(calls.link(session_id, workspace))

    def unlink(self, session_id: str) -> SessionOut:
        """Stop copying a session's messages onto its workspace (copies made stay).
        :class:`NotFound`."""
        return self.send(calls.unlink(session_id))

    def get_session(self, session_id: str) -> SessionOut:
        """The session's leaf, entry count and unobserved tokens. :class:`NotFound`."""
        return self.send(calls.get_session(session_id))

    def list_sessions(
        self,
        *,
        limit: int = 50,
        cursor: str | None = None,
        updated_since: datetime | str | None = None,
    ) -> SessionsPage:
        """A page of the key's tenant's sessions, newest first; pass ``next_cursor`` back as
        ``cursor`` for the next page (``None`` after the last). ``updated_since`` (a datetime
        or ISO-8601 text; naive means UTC) keeps sessions updated at or after it.
        :class:`InvalidRequest` for ``limit`` outside 1..100 or a cursor the API did not hand
        out."""
        return self.send(calls.list_sessions(limit, cursor, updated_since))

    def append(self, session_id: str, entries: Sequence[EntryLike]) -> AppendEntriesResponse:
        """Append entries (``EntryIn``, ``MessageWire`` or dicts) in order.

        Entries without an id get a fresh one, so a retried request is not appended twice.
        More than 1,000 entries go in several requests: each is atomic, the whole is not (on
        an error, re-send the same list: stored entries come back as ``duplicate_ids``).
        :class:`Conflict` when an id is stored with other content, :class:`InvalidRequest`
        for a malformed entry.
        """
        results = [self.send(calls.append(session_id, b)) for b in entry_batches(entries)]
        return merge_appends(results)

    def entries(self, session_id: str, after: str | None = None, limit: int = 100) -> EntriesPage:
        """Current-branch entries after entry ``after`` (from the start when ``None``)."""
        return self.send(calls.entries(session_id, after, limit))

    # Flush and jobs ------------------------------------------------------------------------

    def flush(
        self, session_id: str, *, force: bool = False, full_reflection_rebuild: bool = False
    ) -> FlushTicket:
        """Request a flush; the job id serving it (``coalesced`` when a pending
        job serves it too). :class:`Unavailable` when Redis stays down through the retries."""
        return self.send(calls.flush(session_id, force, full_reflection_rebuild))

    def job(self, job_id: str) -> JobOut:
        """A flush job's state, timings, counts and redacted error. :class:`NotFound`."""
        return self.send(calls.job(job_id))

    def wait_for_job(self, job_id: str, timeout_s: float = 60.0) -> JobOut:
        """Poll the job until it is ``succeeded``, ``failed`` or ``skipped`` and return it (a
        failed job is returned, not raised: its ``error`` says why). :class:`JobTimeout` when
        it is still queued/running after ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        poll = 0
        while True:
            poll += 1
            current = self.job(job_id)
            if current.state in FINAL_JOB_STATES:
                return current
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise JobTimeout(f"job {job_id} still {current.state} after {timeout_s} s", current)
            time.sleep(min(backoff_delay_s(poll, POLL, 0.0), remaining))

    # Memory reads --------------------------------------------------------------------------

    def context(
        self,
        session_id: str,
        *,
        scope: str | None = None,
        include: Include | None = None,
        max_tokens: int | None = None,
    ) -> ContextOut:
        """The ``observational-memory`` and ``recent-messages`` blocks for the next turn:
        memory, then every message memory does not cover yet (``unobserved``) and the last
        few, within ``max_tokens`` estimated tokens (the server's default when ``None``).
        ``gap`` names unobserved messages the budget left out, with the cursor to page them
        from. :class:`InvalidRequest` for a budget out of range."""
        return self.send(calls.context(session_id, scope, include, max_tokens))

    def recall(self, session_id: str, memory_id: str) -> RecallOut:
        """What an observation/reflection rests on (``found`` false for an unknown id).
        :class:`InvalidRequest` for a malformed id."""
        return self.send(calls.recall(session_id, memory_id))

    def messages(
        self,
        session_id: str,
        cursor: str,
        *,
        limit: int = 20,
        direction: Literal["forward", "backward"] = "forward",
        detail: Literal["summary", "full"] = "summary",
    ) -> MessagesPage:
        """A page of messages around message ``cursor`` (``limit`` <= 100)."""
        return self.send(calls.messages(session_id, cursor, limit, direction, detail))

    def status(self, session_id: str) -> StatusOut:
        """om:status: memory counts and the rendered status text."""
        return self.send(calls.status(session_id))

    def view(self, session_id: str, *, full: bool = False) -> ViewOut:
        """om:view: visible memory, or all active memory with ``full``."""
        return self.send(calls.view(session_id, full))

    def compact(self, session_id: str, keep_recent_entries: int = 8) -> EntryOut:
        """Append a compaction entry summarising the session (not retried on a lost answer)."""
        return self.send(calls.compact(session_id, keep_recent_entries))

    # Scopes and revocations ----------------------------------------------------------------

    def open_scope(
        self,
        session_id: str,
        scope_id: str,
        *,
        parent_id: str | None = None,
        kind: str | None = None,
        label: str | None = None,
    ) -> ScopeRecordOut:
        """Open a work scope. :class:`Conflict` when it exists."""
        return self.send(calls.open_scope(session_id, scope_id, parent_id, kind, label))

    def close_scope(self, session_id: str, scope_id: str) -> ScopeRecordOut:
        """Close a work scope."""
        return self.send(calls.scope_action(session_id, scope_id, "close"))

    def enter_scope(self, session_id: str, scope_id: str) -> ScopeRecordOut:
        """Enter a work scope (new entries belong to it)."""
        return self.send(calls.scope_action(session_id, scope_id, "enter"))

    def leave_scope(self, session_id: str, scope_id: str) -> ScopeRecordOut:
        """Leave a work scope."""
        return self.send(calls.scope_action(session_id, scope_id, "leave"))

    def bind(self, session_id: str, scope_id: str, refs: Sequence[str]) -> ScopeRecordOut:
        """Bind ``om:<id>``/``reflection:<id>`` memory to a scope."""
        return self.send(calls.scope_refs(session_id, scope_id, "bind", refs))

    def unbind(self, session_id: str, scope_id: str, refs: Sequence[str]) -> ScopeRecordOut:
        """Unbind memory references from a scope."""
        return self.send(calls.scope_refs(session_id, scope_id, "unbind", refs))

    def grant(self, session_id: str, scope_id: str, principals: Sequence[str]) -> ScopeRecordOut:
        """Share a scope's memory with other sessions of the tenant."""
        return self.send(calls.scope_principals(session_id, scope_id, "grant", principals))

    def revoke(self, session_id: str, scope_id: str, principals: Sequence[str]) -> ScopeRecordOut:
        """Stop sharing a scope with sessions."""
        return self.send(calls.scope_principals(session_id, scope_id, "revoke", principals))

    def revoke_entries(self, session_id: str, entry_ids: Sequence[str]) -> RevocationOut:
        """Withhold memory derived from these entries; the observations it dropped."""
        return self.send(calls.revoke_entries(session_id, entry_ids))

    # Operations ----------------------------------------------------------------------------

    def healthz(self) -> HealthOut:
        """Liveness."""
        return self.send(calls.healthz())

    def readyz(self) -> HealthOut:
        """Readiness (Redis and the database); :class:`Unavailable` when not ready."""
        return self.send(calls.readyz())

    def metrics(self) -> str:
        """Prometheus metrics text."""
        return self.send(calls.metrics())

    def create_tenant(self, tenant_id: str, name: str | None = None) -> TenantOut:
        """Admin: create a tenant. Needs ``admin_token``; :class:`Conflict` if it exists."""
        return self.send(calls.create_tenant(tenant_id, name))

    def create_key(self, tenant_id: str, label: str = "") -> KeyOut:
        """Admin: a new API key for the tenant (its plaintext is in this answer only)."""
        return self.send(calls.create_key(tenant_id, label))

    def list_keys(self, tenant_id: str) -> ApiKeysOut:
        """Admin: the tenant's keys (id, prefix, label, times; never the key), oldest first.
        :class:`NotFound` for an unknown tenant."""
        return self.send(calls.list_keys(tenant_id))

    def revoke_key(self, key_id: str) -> ApiKeyOut:
        """Admin: revoke a key by id; every later request with it is a 401 (:class:`Unauthorized`),
        on every API replica. Revoking it again changes nothing. :class:`NotFound`."""
        return self.send(calls.revoke_key(key_id))
