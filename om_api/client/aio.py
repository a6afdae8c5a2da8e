"""The asynchronous Python client of the om HTTP API: :class:`AsyncOMClient`, the twin of
:class:`~om_api.client.clients.OMClient` (same methods, awaited; same errors, same retries).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import Self, TypeVar

import httpx

from om_api.client import calls
from om_api.client.base import ClientBase
from om_api.client.core import (
    Answer,
    Attempts,
    BinarySink,
    Call,
    EntryLike,
    JobWait,
    error_for,
    merge_appends,
)
from om_api.schemas import AppendEntriesResponse, JobOut

T = TypeVar("T")


class AsyncOMClient(ClientBase[httpx.AsyncBaseTransport, httpx.AsyncClient]):
    """The asynchronous twin of :class:`~om_api.client.clients.OMClient` (same methods,
    awaited; same errors)."""

    def _connect(
        self, base_url: str, timeout_s: float, transport: httpx.AsyncBaseTransport | None
    ) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=base_url, timeout=timeout_s, transport=transport)

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
        attempts = Attempts(call, self._retry)
        while True:
            answer = await self._answer(call)
            wait = attempts.wait_s(answer)
            if wait is None:
                return attempts.result(answer)
            await asyncio.sleep(wait)

    async def _answer(self, call: Call[T]) -> Answer:
        try:
            return await self._http.request(**self._request(call))
        except httpx.TransportError as exc:
            return exc

    async def append(self, session_id: str, entries: Sequence[EntryLike]) -> AppendEntriesResponse:
        """See :meth:`~om_api.client.clients.OMClient.append`."""
        results = [await self.send(call) for call in calls.append(session_id, entries)]
        return merge_appends(results)

    async def wait_for_job(self, job_id: str, timeout_s: float = 60.0) -> JobOut:
        """See :meth:`~om_api.client.clients.OMClient.wait_for_job`."""
        waiting = JobWait(job_id, timeout_s)
        current = await self.job(job_id)
        while (pause := waiting.pause_s(current)) is not None:
            await asyncio.sleep(pause)
            current = await self.job(job_id)
        return current

    async def export_session(self, session_id: str, out: BinarySink) -> int:
        """See :meth:`~om_api.client.clients.OMClient.export_session`."""
        return await self._stream(calls.export_session(session_id), out)

    async def export_tenant(self, tenant_id: str, out: BinarySink) -> int:
        """See :meth:`~om_api.client.clients.OMClient.export_tenant`."""
        return await self._stream(calls.export_tenant(tenant_id), out)

    async def _stream(self, call: Call[str], out: BinarySink) -> int:
        written = 0
        async with self._http.stream(**self._request(call)) as response:
            if not response.is_success:
                await response.aread()
                raise error_for(call, response)
            async for chunk in response.aiter_bytes():
                out.write(chunk)
                written += len(chunk)
        return written
