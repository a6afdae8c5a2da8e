"""The asynchronous Python client of the om HTTP API: :class:`AsyncOMClient`, the twin of
:class:`~om_api.client.clients.OMClient` (same methods, awaited; same errors, same retries).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

import httpx

from om_api.client import calls
from om_api.client.calls import Include
from om_api.client.core import (
    DEFAULT_TIMEOUT_S,
    FINAL_JOB_STATES,
    POLL,
    Call,
    EntryLike,
    JobTimeout,
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

T = TypeVar("T")


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
            await asyncio.sleep(wait)

    async def create_session(
        self,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        workspace: str | None = None,
    ) -> SessionOut:
        """See :meth:`~om_api.client.clients.OMClient.create_session`."""
        return await self.send(calls.create_session(session_id, metadata, workspace))

    async def link(self, session_id: str, workspace: str) -> SessionOut:
        """See :meth:`~om_api.client.clients.OMClient.link`."""
        return await self.send(calls.link(session_id, workspace))

    async def unlink(self, session_id: str) -> SessionOut:
        """See :meth:`~om_api.client.clients.OMClient.unlink`."""
        return await self.send(calls.unlink(session_id))

    async def get_session(self, session_id: str) -> SessionOut:
        """See :meth:`~om_api.client.clients.OMClient.get_session`."""
        return await self.send(calls.get_session(session_id))

    async def list_sessions(
        self,
        *,
        limit: int = 50,
        cursor: str | None = None,
        updated_since: datetime | str | None = None,
    ) -> SessionsPage:
        """See :meth:`~om_api.client.clients.OMClient.list_sessions`."""
        return await self.send(calls.list_sessions(limit, cursor, updated_since))

    async def append(self, session_id: str, entries: Sequence[EntryLike]) -> AppendEntriesResponse:
        """See :meth:`~om_api.client.clients.OMClient.append`."""
        results = [await self.send(calls.append(session_id, b)) for b in entry_batches(entries)]
        return merge_appends(results)

    async def entries(
        self, session_id: str, after: str | None = None, limit: int = 100
    ) -> EntriesPage:
        """See :meth:`~om_api.client.clients.OMClient.entries`."""
        return await self.send(calls.entries(session_id, after, limit))

    async def flush(
        self, session_id: str, *, force: bool = False, full_reflection_rebuild: bool = False
    ) -> FlushTicket:
        """See :meth:`~om_api.client.clients.OMClient.flush`."""
        return await self.send(calls.flush(session_id, force, full_reflection_rebuild))

    async def job(self, job_id: str) -> JobOut:
        """See :meth:`~om_api.client.clients.OMClient.job`."""
        return await self.send(calls.job(job_id))

    async def wait_for_job(self, job_id: str, timeout_s: float = 60.0) -> JobOut:
        """See :meth:`~om_api.client.clients.OMClient.wait_for_job`."""
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
            await asyncio.sleep(min(backoff_delay_s(poll, POLL, 0.0), remaining))

    async def context(
        self,
        session_id: str,
        *,
        scope: str | None = None,
        include: Include | None = None,
        max_tokens: int | None = None,
    ) -> ContextOut:
        """See :meth:`~om_api.client.clients.OMClient.context`."""
        return await self.send(calls.context(session_id, scope, include, max_tokens))

    async def recall(self, session_id: str, memory_id: str) -> RecallOut:
        """See :meth:`~om_api.client.clients.OMClient.recall`."""
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
        """See :meth:`~om_api.client.clients.OMClient.messages`."""
        return await self.send(calls.messages(session_id, cursor, limit, direction, detail))

    async def status(self, session_id: str) -> StatusOut:
        """See :meth:`~om_api.client.clients.OMClient.status`."""
        return await self.send(calls.status(session_id))

    async def view(self, session_id: str, *, full: bool = False) -> ViewOut:
        """See :meth:`~om_api.client.clients.OMClient.view`."""
        return await self.send(calls.view(session_id, full))

    async def compact(self, session_id: str, keep_recent_entries: int = 8) -> EntryOut:
        """See :meth:`~om_api.client.clients.OMClient.compact`."""
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
        """See :meth:`~om_api.client.clients.OMClient.open_scope`."""
        return await self.send(calls.open_scope(session_id, scope_id, parent_id, kind, label))

    async def close_scope(self, session_id: str, scope_id: str) -> ScopeRecordOut:
        """See :meth:`~om_api.client.clients.OMClient.close_scope`."""
        return await self.send(calls.scope_action(session_id, scope_id, "close"))

    async def enter_scope(self, session_id: str, scope_id: str) -> ScopeRecordOut:
        """See :meth:`~om_api.client.clients.OMClient.enter_scope`."""
        return await self.send(calls.scope_action(session_id, scope_id, "enter"))

    async def leave_scope(self, session_id: str, scope_id: str) -> ScopeRecordOut:
        """See :meth:`~om_api.client.clients.OMClient.leave_scope`."""
        return await self.send(calls.scope_action(session_id, scope_id, "leave"))

    async def bind(self, session_id: str, scope_id: str, refs: Sequence[str]) -> ScopeRecordOut:
        """See :meth:`~om_api.client.clients.OMClient.bind`."""
        return await self.send(calls.scope_refs(session_id, scope_id, "bind", refs))

    async def unbind(self, session_id: str, scope_id: str, refs: Sequence[str]) -> ScopeRecordOut:
        """See :meth:`~om_api.client.clients.OMClient.unbind`."""
        return await self.send(calls.scope_refs(session_id, scope_id, "unbind", refs))

    async def grant(
        self, session_id: str, scope_id: str, principals: Sequence[str]
    ) -> ScopeRecordOut:
        """See :meth:`~om_api.client.clients.OMClient.grant`."""
        return await self.send(calls.scope_principals(session_id, scope_id, "grant", principals))

    async def revoke(
        self, session_id: str, scope_id: str, principals: Sequence[str]
    ) -> ScopeRecordOut:
        """See :meth:`~om_api.client.clients.OMClient.revoke`."""
        return await self.send(calls.scope_principals(session_id, scope_id, "revoke", principals))

    async def revoke_entries(self, session_id: str, entry_ids: Sequence[str]) -> RevocationOut:
        """See :meth:`~om_api.client.clients.OMClient.revoke_entries`."""
        return await self.send(calls.revoke_entries(session_id, entry_ids))

    async def healthz(self) -> HealthOut:
        """See :meth:`~om_api.client.clients.OMClient.healthz`."""
        return await self.send(calls.healthz())

    async def readyz(self) -> HealthOut:
        """See :meth:`~om_api.client.clients.OMClient.readyz`."""
        return await self.send(calls.readyz())

    async def metrics(self) -> str:
        """See :meth:`~om_api.client.clients.OMClient.metrics`."""
        return await self.send(calls.metrics())

    async def create_tenant(self, tenant_id: str, name: str | None = None) -> TenantOut:
        """See :meth:`~om_api.client.clients.OMClient.create_tenant`."""
        return await self.send(calls.create_tenant(tenant_id, name))

    async def create_key(self, tenant_id: str, label: str = "") -> KeyOut:
        """See :meth:`~om_api.client.clients.OMClient.create_key`."""
        return await self.send(calls.create_key(tenant_id, label))

    async def list_keys(self, tenant_id: str) -> ApiKeysOut:
        """See :meth:`~om_api.client.clients.OMClient.list_keys`."""
        return await self.send(calls.list_keys(tenant_id))

    async def revoke_key(self, key_id: str) -> ApiKeyOut:
        """See :meth:`~om_api.client.clients.OMClient.revoke_key`."""
        return await self.send(calls.revoke_key(key_id))
