"""The synchronous Python client of the om HTTP API, :class:`OMClient`; its asynchronous twin,
:class:`~om_api.client.aio.AsyncOMClient`, has the same methods.

An agent server's whole integration::

    with OMClient("http://127.0.0.1:8000", api_key) as om:
        om.append(session_id, run_messages)      # the job's messages (ids make it idempotent)
        om.flush(session_id)                     # 202: observe/reflect in the background
        blocks = om.context(session_id).blocks   # before the next turn

Every method returns the API's pydantic wire model (:mod:`om_api.schemas`) and raises one of
the :class:`~om_api.client.core.OMClientError` subclasses (see :mod:`om_api.client.core`); the
methods that are one API call each are :mod:`om_api.client.calls`' functions, offered by
:class:`~om_api.client.base.ClientBase`. 503s and dropped
connections are retried with exponential backoff and full jitter, honouring ``Retry-After``
(see :class:`~om_core.policy.backoff.RetryPolicy`); other failures raise at once.
"""

from __future__ import annotations

import time
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


class OMClient(ClientBase[httpx.BaseTransport, httpx.Client]):
    """Synchronous client; its options are :class:`~om_api.client.base.ClientBase`'s.

    Thread-safe like the ``httpx.Client`` under it; close it (or use ``with``) when done.
    """

    def _connect(
        self, base_url: str, timeout_s: float, transport: httpx.BaseTransport | None
    ) -> httpx.Client:
        return httpx.Client(base_url=base_url, timeout=timeout_s, transport=transport)

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
        attempts = Attempts(call, self._retry)
        while True:
            answer = self._answer(call)
            wait = attempts.wait_s(answer)
            if wait is None:
                return attempts.result(answer)
            time.sleep(wait)

    def _answer(self, call: Call[T]) -> Answer:
        try:
            return self._http.request(**self._request(call))
        except httpx.TransportError as exc:
            return exc

    def append(self, session_id: str, entries: Sequence[EntryLike]) -> AppendEntriesResponse:
        """Append entries (``EntryIn``, ``MessageWire`` or dicts) in order.

        Entries without an id get a fresh one, so a retried request is not appended twice.
        More than 1,000 entries go in several requests: each is atomic, the whole is not (on
        an error, re-send the same list: stored entries come back as ``duplicate_ids``).
        :class:`Conflict` when an id is stored with other content, :class:`InvalidRequest`
        for a malformed entry.
        """
        results = [self.send(call) for call in calls.append(session_id, entries)]
        return merge_appends(results)

    def wait_for_job(self, job_id: str, timeout_s: float = 60.0) -> JobOut:
        """Poll the job until it is ``succeeded``, ``failed`` or ``skipped`` and return it (a
        failed job is returned, not raised: its ``error`` says why). :class:`JobTimeout` when
        it is still queued/running after ``timeout_s`` seconds."""
        waiting = JobWait(job_id, timeout_s)
        current = self.job(job_id)
        while (pause := waiting.pause_s(current)) is not None:
            time.sleep(pause)
            current = self.job(job_id)
        return current

    def export_session(self, session_id: str, out: BinarySink) -> int:
        """Write the session's export (JSON lines) to ``out`` as it arrives, in constant
        memory; the bytes written. :class:`NotFound` for a missing session."""
        return self._stream(calls.export_session(session_id), out)

    def export_tenant(self, tenant_id: str, out: BinarySink) -> int:
        """Admin: write every session of the tenant, one export after the other, to ``out``
        as it arrives; the bytes written. :class:`NotFound` for an unknown tenant."""
        return self._stream(calls.export_tenant(tenant_id), out)

    def _stream(self, call: Call[str], out: BinarySink) -> int:
        written = 0
        with self._http.stream(**self._request(call)) as response:
            if not response.is_success:
                response.read()
                raise error_for(call, response)
            for chunk in response.iter_bytes():
                out.write(chunk)
                written += len(chunk)
        return written
