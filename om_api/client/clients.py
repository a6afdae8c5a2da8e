"""Python clients of the om HTTP API: :class:`OMClient` (sync) and :class:`AsyncOMClient`.

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

import asyncio
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

import httpx

from om_api.client import calls
from om_api.client.calls import Include
from om_api.client.core import (
    FINAL_JOB_STATES,
    Call,
    Conflict,
    EntryLike,
    InvalidRequest,
    InvalidResponse,
    JobTimeout,
    NotFound,
    OMClientError,
    PayloadTooLarge,
    ServerError,
    Unauthorized,
    Unavailable,
    decode,
    entry_batches,
    retry_after_s,
    retry_wait_s,
    should_retry,
    transport_error,
    was_sent,
)
from om_api.schemas import (
    AppendEntriesResponse,
    ContextOut,
    EntriesPage,
    EntryOut,
    FlushAccepted,
    HealthOut,
    JobOut,
    KeyOut,
    MessagesPage,
    RecallOut,
    RevocationOut,
    ScopeRecordOut,
    SessionOut,
    StatusOut,
    TenantOut,
    ViewOut,
)
from om_core.backoff import RetryPolicy, backoff_delay_s

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
    "RetryPolicy",
    "ServerError",
    "Unauthorized",
    "Unavailable",
]

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 30.0
_POLL = RetryPolicy(base_s=0.1, cap_s=1.0, multiplier=1.5, jitter=0.0)
"""``wait_for_job``'s pauses between polls: 0.1 s growing by half per poll, at most 1 s."""


def _headers(api_key: str | None, admin_token: str | None, call: Call[Any]) -> dict[str, str]:
    token = admin_token if call.admin else api_key
    return {"Authorization": f"Bearer {token}"} if token else {}


def _merge(results: Sequence[AppendEntriesResponse]) -> AppendEntriesResponse:
    return AppendEntriesResponse(
        appended_ids=[i for r in results for i in r.appended_ids],
        duplicate_ids=[i for r in results for i in r.duplicate_ids],
        leaf_id=results[-1].leaf_id if results else None,
    )


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
                    headers=_headers(self._api_key, self._admin_token, call),
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
        self, session_id: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> SessionOut:
        """Create a session (random id when none). :class:`Conflict` if the id is taken."""
        return self.send(calls.create_session(session_id, metadata))

    def get_session(self, session_id: str) -> SessionOut:
        """The session's leaf, entry count and unobserved tokens. :class:`NotFound`."""
        return self.send(calls.get_session(session_id))

    def append(self, session_id: str, entries: Sequence[EntryLike]) -> AppendEntriesResponse:
        """Append entries (``EntryIn``, ``MessageWire`` or dicts) in order.

        Entries without an id get a fresh one, so a retried request is not appended twice.
        More than 1,000 entries go in several requests: each is atomic, the whole is not (on
        an error, re-send the same list: stored entries come back as ``duplicate_ids``).
        :class:`Conflict` when an id is stored with other content, :class:`InvalidRequest`
        for a malformed entry.
        """
        results = [self.send(calls.append(session_id, b)) for b in entry_batches(entries)]
        return _merge(results)

    def entries(self, session_id: str, after: str | None = None, limit: int = 100) -> EntriesPage:
        """Current-branch entries after entry ``after`` (from the start when ``None``)."""
        return self.send(calls.entries(session_id, after, limit))

    # Flush and jobs ------------------------------------------------------------------------

    def flush(
        self, session_id: str, *, force: bool = False, full_reflection_rebuild: bool = False
    ) -> FlushAccepted:
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
            time.sleep(min(backoff_delay_s(poll, _POLL, 0.0), remaining))

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


class AsyncOMClient:
    """The asynchronous twin of :class:`OMClient` (same methods, awaited; same errors)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        admin_token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._api_key = api_key
        self._admin_token = admin_token
        self._retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), timeout=timeout_s, transport=transport
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def send(self, call: Call[T]) -> T:
        """Send one request with retries; the parsed result or a typed error."""
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    params=dict(call.params),
                    json=call.json,
                    headers=_headers(self._api_key, self._admin_token, call),
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
            await asyncio.sleep(wait)

    async def create_session(
        self, session_id: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> SessionOut:
        """See :meth:`OMClient.create_session`."""
        return await self.send(calls.create_session(session_id, metadata))

    async def get_session(self, session_id: str) -> SessionOut:
        """See :meth:`OMClient.get_session`."""
        return await self.send(calls.get_session(session_id))

    async def append(self, session_id: str, entries: Sequence[EntryLike]) -> AppendEntriesResponse:
        """See :meth:`OMClient.append`."""
        results = [await self.send(calls.append(session_id, b)) for b in entry_batches(entries)]
        return _merge(results)

    async def entries(
        self, session_id: str, after: str | None = None, limit: int = 100
    ) -> EntriesPage:
        """See :meth:`OMClient.entries`."""
        return await self.send(calls.entries(session_id, after, limit))

    async def flush(
        self, session_id: str, *, force: bool = False, full_reflection_rebuild: bool = False
    ) -> FlushAccepted:
        """See :meth:`OMClient.flush`."""
        return await self.send(calls.flush(session_id, force, full_reflection_rebuild))

    async def job(self, job_id: str) -> JobOut:
        """See :meth:`OMClient.job`."""
        return await self.send(calls.job(job_id))

    async def wait_for_job(self, job_id: str, timeout_s: float = 60.0) -> JobOut:
        """See :meth:`OMClient.wait_for_job`."""
        deadline = time.monotonic() + timeout_s
        poll = 0
        while True:
            poll += 1
            current = await self.job(job_id)
            if current.state in FINAL_JOB_STATES:
                return current
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise JobTimeout(f"job {job_id} still {current.state} after {timeout_s} s", current)
            await asyncio.sleep(min(backoff_delay_s(poll, _POLL, 0.0), remaining))

    async def context(
        self,
        session_id: str,
        *,
        scope: str | None = None,
        include: Include | None = None,
        max_tokens: int | None = None,
    ) -> ContextOut:
        """See :meth:`OMClient.context`."""
        return await self.send(calls.context(session_id, scope, include, max_tokens))

    async def recall(self, session_id: str, memory_id: str) -> RecallOut:
        """See :meth:`OMClient.recall`."""
        return await self.send(calls.recall(session_id, memory_id))

    async def messages(
        self,
        session_id: str,
        cursor: str,
        *,
        limit: int = 20,
        direction: Literal["forward", "backward"] = "forward",
        detail: Literal["summary", "full"] = "summary",
    ) -> MessagesPage:
        """See :meth:`OMClient.messages`."""
        return await self.send(calls.messages(session_id, cursor, limit, direction, detail))

    async def status(self, session_id: str) -> StatusOut:
        """See :meth:`OMClient.status`."""
        return await self.send(calls.status(session_id))

    async def view(self, session_id: str, *, full: bool = False) -> ViewOut:
        """See :meth:`OMClient.view`."""
        return await self.send(calls.view(session_id, full))

    async def compact(self, session_id: str, keep_recent_entries: int = 8) -> EntryOut:
        """See :meth:`OMClient.compact`."""
        return await self.send(calls.compact(session_id, keep_recent_entries))

    async def open_scope(
        self,
        session_id: str,
        scope_id: str,
        *,
        parent_id: str | None = None,
        kind: str | None = None,
        label: str | None = None,
    ) -> ScopeRecordOut:
        """See :meth:`OMClient.open_scope`."""
        return await self.send(calls.open_scope(session_id, scope_id, parent_id, kind, label))

    async def close_scope(self, session_id: str, scope_id: str) -> ScopeRecordOut:
        """See :meth:`OMClient.close_scope`."""
        return await self.send(calls.scope_action(session_id, scope_id, "close"))

    async def enter_scope(self, session_id: str, scope_id: str) -> ScopeRecordOut:
        """See :meth:`OMClient.enter_scope`."""
        return await self.send(calls.scope_action(session_id, scope_id, "enter"))

    async def leave_scope(self, session_id: str, scope_id: str) -> ScopeRecordOut:
        """See :meth:`OMClient.leave_scope`."""
        return await self.send(calls.scope_action(session_id, scope_id, "leave"))

    async def bind(self, session_id: str, scope_id: str, refs: Sequence[str]) -> ScopeRecordOut:
        """See :meth:`OMClient.bind`."""
        return await self.send(calls.scope_refs(session_id, scope_id, "bind", refs))

    async def unbind(self, session_id: str, scope_id: str, refs: Sequence[str]) -> ScopeRecordOut:
        """See :meth:`OMClient.unbind`."""
        return await self.send(calls.scope_refs(session_id, scope_id, "unbind", refs))

    async def grant(
        self, session_id: str, scope_id: str, principals: Sequence[str]
    ) -> ScopeRecordOut:
        """See :meth:`OMClient.grant`."""
        return await self.send(calls.scope_principals(session_id, scope_id, "grant", principals))

    async def revoke(
        self, session_id: str, scope_id: str, principals: Sequence[str]
    ) -> ScopeRecordOut:
        """See :meth:`OMClient.revoke`."""
        return await self.send(calls.scope_principals(session_id, scope_id, "revoke", principals))

    async def revoke_entries(self, session_id: str, entry_ids: Sequence[str]) -> RevocationOut:
        """See :meth:`OMClient.revoke_entries`."""
        return await self.send(calls.revoke_entries(session_id, entry_ids))

    async def healthz(self) -> HealthOut:
        """See :meth:`OMClient.healthz`."""
        return await self.send(calls.healthz())

    async def readyz(self) -> HealthOut:
        """See :meth:`OMClient.readyz`."""
        return await self.send(calls.readyz())

    async def metrics(self) -> str:
        """See :meth:`OMClient.metrics`."""
        return await self.send(calls.metrics())

    async def create_tenant(self, tenant_id: str, name: str | None = None) -> TenantOut:
        """See :meth:`OMClient.create_tenant`."""
        return await self.send(calls.create_tenant(tenant_id, name))

    async def create_key(self, tenant_id: str, label: str = "") -> KeyOut:
        """See :meth:`OMClient.create_key`."""
        return await self.send(calls.create_key(tenant_id, label))
