"""What the sync and async clients share: the error tree, the retry rule (:class:`Attempts`),
request descriptions, response decoding and the job poll (:class:`JobWait`). No I/O happens
here, so both clients behave identically.
:class:`RetryPolicy` is :class:`om_core.policy.backoff.RetryPolicy`, re-exported here and from
:mod:`om_api.client`; its defaults are the client's.

Error tree (all raised by :class:`~om_api.client.OMClient` and ``AsyncOMClient``), part of
the service's one tree: ``OMClientError`` is an
:class:`~om_core.errors.ObservationalMemoryError`, and each error also subclasses the category
of :mod:`om_core.errors` in brackets, so ``except om_core.errors.NotFoundError`` catches a
client's 404 and a store's missing session alike::

    OMClientError
    ├── Unauthorized      401/403: no key, a bad or revoked key, a bad admin token
    │                     [UnauthorizedError]
    ├── NotFound          404: missing, or another tenant's (never told apart) [NotFoundError]
    ├── Conflict          409: an id already stored with other content, a scope state clash
    │                     [ConflictError]
    ├── InvalidRequest    400/422, or refused before sending: the reason is in ``detail``
    │   │                 [InvalidInputError, so a ValueError]
    │   └── PayloadTooLarge   413
    ├── Unavailable       503 or a transport failure, after every retry [UnavailableError]
    ├── RateLimited       429 after every retry: ``retry_after_s`` [UnavailableError]
    ├── ServerError       500 and other statuses the API does not document
    ├── InvalidResponse   a 2xx whose body does not match the wire model
    └── JobTimeout        ``wait_for_job`` ran out of time (``job`` is the last state seen)
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from om_api.schemas import AppendEntriesResponse, EntryIn, ErrorBody, JobOut, MessageWire
from om_core.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    ObservationalMemoryError,
    UnauthorizedError,
    UnavailableError,
)
from om_core.policy.backoff import RetryPolicy, backoff_delay_s, next_delay_s, parse_retry_after

T = TypeVar("T")

FINAL_JOB_STATES: Final = frozenset({"succeeded", "failed", "skipped"})
MAX_BATCH: Final = 1000
"""Entries per append request (the API's cap); longer lists go in several requests."""
DEFAULT_TIMEOUT_S: Final = 30.0
"""Seconds a client waits for one answer."""
POLL: Final = RetryPolicy(base_s=0.1, cap_s=1.0, multiplier=1.5, jitter=0.0)
"""``wait_for_job``'s pauses between polls: 0.1 s growing by half per poll, at most 1 s."""


class OMClientError(ObservationalMemoryError):
    """Root of every client error. ``status`` is the HTTP status (``None`` when no answer came),
    ``code`` the API's machine error code, ``detail`` its reason, ``request_id`` the server's id
    of the request (quote it when reporting a problem)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        detail: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.detail = detail
        self.request_id = request_id


class Unauthorized(OMClientError, UnauthorizedError):
    """401/403: the API key (or admin token) is missing, unknown or revoked."""


class NotFound(OMClientError, NotFoundError):
    """404: the session, job or scope does not exist for this tenant."""


class Conflict(OMClientError, ConflictError):
    """409: the request clashes with stored state (same id, other content ...)."""


class InvalidRequest(OMClientError, InvalidInputError):
    """400/422: the request was refused as invalid; ``detail`` says why, naming the field.

    Raised before sending (``status`` ``None``) for everything the client can check itself:
    a malformed id, a role the API does not know, a string where a list belongs ..."""


class PayloadTooLarge(InvalidRequest):
    """413: the body exceeds the API's limit; send smaller batches."""


class Unavailable(OMClientError, UnavailableError):
    """503 or no answer (connection refused, timeout) after the retries ran out."""


class RateLimited(OMClientError, UnavailableError):
    """429: the API key is over a rate limit (``detail`` names the class and rate) and the
    retries ran out, or the client has none. ``retry_after_s`` is the server's wait, seconds."""

    retry_after_s: float | None = None


class ServerError(OMClientError):
    """A 5xx other than 503, or any status the API does not document."""


class InvalidResponse(OMClientError):
    """A success status whose body does not parse as the expected wire model."""


class JobTimeout(OMClientError):
    """:meth:`wait_for_job` gave up; ``job`` is the last state it read."""

    def __init__(self, message: str, job: JobOut) -> None:
        super().__init__(message)
        self.job = job


def refused(field: str, reason: str) -> InvalidRequest:
    """The error for a local check: ``field: reason``, with the API's ``invalid_input`` code."""
    message = f"{field}: {reason}"
    return InvalidRequest(message, code="invalid_input", detail=message)


def _loc(field: str, loc: Sequence[int | str]) -> str:
    path = field
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "body"


def from_validation(exc: ValidationError, field: str = "") -> InvalidRequest:
    """The :class:`InvalidRequest` for a request model that refused its input: each problem
    as ``path: message`` (at most three), the path starting at ``field``."""
    problems = exc.errors(include_url=False, include_input=False)
    parts = [f"{_loc(field, p['loc'])}: {p['msg']}" for p in problems[:3]]
    more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
    message = "; ".join(parts) + more
    return InvalidRequest(message, code="invalid_input", detail=message)


_BY_STATUS: Final[Mapping[int, type[OMClientError]]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidRequest,
    429: RateLimited,
    503: Unavailable,
}


def retry_wait_s(policy: RetryPolicy, attempt: int, retry_after: float | None) -> float | None:
    """Seconds to wait after failed attempt ``attempt`` (1-based), or ``None`` when the
    attempts are used up: :func:`om_core.policy.backoff.next_delay_s` with a fresh random draw.

    With the default :class:`RetryPolicy` the wait before retry ``n`` (from 1) is uniform in
    ``[0, min(cap_s, base_s * 2**(n-1))]`` ("full jitter", so a crowd of clients does not return
    in step), or the server's ``Retry-After`` plus up to 10 % jitter, capped at
    ``max_retry_after_s``. Which failures are retried at all is :func:`should_retry`'s rule.
    """
    return next_delay_s(attempt, policy, random.random(), retry_after_s=retry_after)


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API request and the model its success body parses into (``str``: plain text)."""

    method: str
    path: str
    model: type[T]
    json: Any = None
    params: Mapping[str, Any] = field(default_factory=dict)
    idempotent: bool = True
    admin: bool = False
    content: bytes | None = None
    """A raw body (JSON lines) sent instead of ``json``."""


class BinarySink(Protocol):
    """Where a streamed export goes: anything with ``write(bytes)`` (an open binary file)."""

    def write(self, data: bytes, /) -> object: ...


NDJSON: Final = "application/x-ndjson"
"""The media type of an export and of an import's body."""


def auth_headers(api_key: str | None, admin_token: str | None, call: Call[Any]) -> dict[str, str]:
    """The ``Authorization`` header of ``call``: the admin token for admin calls, else the key."""
    token = admin_token if call.admin else api_key
    return {"Authorization": f"Bearer {token}"} if token else {}


def merge_appends(results: Sequence[AppendEntriesResponse]) -> AppendEntriesResponse:
    """One answer for an append sent in several batches."""
    return AppendEntriesResponse(
        appended_ids=[i for r in results for i in r.appended_ids],
        duplicate_ids=[i for r in results for i in r.duplicate_ids],
        leaf_id=results[-1].leaf_id if results else None,
    )


def retry_after_s(response: httpx.Response) -> float | None:
    """The response's ``Retry-After`` in seconds (delta-seconds or an HTTP date), if any."""
    return parse_retry_after(response.headers.get("retry-after"), time.time())


def should_retry(call: Call[Any], status: int | None, sent: bool) -> bool:
    """Whether a failed attempt may be repeated (how often and when: :func:`retry_wait_s`).

    A 503 or 429 is retried for every request (the server refused it before doing anything);
    502/504 and transport errors after the request was sent only for idempotent requests
    (connection failures before sending are always retried). ``status`` is ``None`` for a
    transport error; ``sent`` is false when the connection never opened."""
    if status is None:
        return call.idempotent or not sent
    if status in (429, 503):
        return True
    return status in (502, 504) and call.idempotent


def decode(call: Call[T], response: httpx.Response) -> T:
    """The success body parsed into ``call.model``, or the typed error for a failure status.

    Raises an :class:`OMClientError` subclass for every non-2xx status, and
    :class:`InvalidResponse` for a 2xx body that is not the expected model.
    """
    if response.is_success:
        if call.model is str:
            return response.text  # type: ignore[return-value]
        model: Any = call.model
        try:
            parsed: T = model.model_validate_json(response.content)
        except ValidationError as exc:
            raise InvalidResponse(
                f"{call.method} {call.path}: unexpected response body: {exc}",
                status=response.status_code,
            ) from exc
        return parsed
    raise error_for(call, response)


def error_for(call: Call[Any], response: httpx.Response) -> OMClientError:
    """The typed error for a failure response, with the API's code, detail and request id."""
    code: str | None = None
    detail = response.text[:500]
    request_id = response.headers.get("x-request-id")
    try:
        body = ErrorBody.model_validate_json(response.content)
    except ValidationError:
        pass
    else:
        code, detail, request_id = body.error, body.detail, body.request_id or request_id
    kind = _BY_STATUS.get(response.status_code, ServerError)
    message = f"{call.method} {call.path}: {response.status_code} {code or ''} {detail}".strip()
    error = kind(
        message, status=response.status_code, code=code, detail=detail, request_id=request_id
    )
    if isinstance(error, RateLimited):
        error.retry_after_s = retry_after_s(response)
    return error


def transport_error(call: Call[Any], exc: httpx.TransportError) -> Unavailable:
    """The :class:`Unavailable` raised when the last attempt got no answer."""
    return Unavailable(f"{call.method} {call.path}: no answer ({exc.__class__.__name__}: {exc})")


def was_sent(exc: httpx.TransportError) -> bool:
    """False when the request surely never reached the server (connecting failed)."""
    return not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)


Answer = httpx.Response | httpx.TransportError
"""What an attempt got: a response, or the transport error that came instead."""


class Attempts(Generic[T]):
    """One call's attempts, decided without I/O: after each answer, how long to wait before the
    next attempt (:meth:`wait_s`), or what the call gives (:meth:`result`). Which failures are
    retried is :func:`should_retry`'s rule, how long to wait :func:`retry_wait_s`'s."""

    def __init__(self, call: Call[T], policy: RetryPolicy) -> None:
        self.call = call
        self._policy = policy
        self._count = 0

    def wait_s(self, answer: Answer) -> float | None:
        """Seconds to wait before attempting again, or ``None`` when ``answer`` is final."""
        self._count += 1
        if isinstance(answer, httpx.TransportError):
            if not should_retry(self.call, None, was_sent(answer)):
                return None
            return retry_wait_s(self._policy, self._count, None)
        if answer.status_code < 400 or not should_retry(self.call, answer.status_code, True):
            return None
        return retry_wait_s(self._policy, self._count, retry_after_s(answer))

    def result(self, answer: Answer) -> T:
        """The final answer's result (see :func:`decode`); :class:`Unavailable` for a transport
        error."""
        if isinstance(answer, httpx.TransportError):
            raise transport_error(self.call, answer) from answer
        return decode(self.call, answer)


class JobWait:
    """``wait_for_job``'s schedule, decided without I/O: after each read of the job, the pause
    before the next (:data:`POLL`, cut to the time left), or ``None`` once the job is final."""

    def __init__(self, job_id: str, timeout_s: float) -> None:
        self._job_id = job_id
        self._timeout_s = timeout_s
        self._deadline = time.monotonic() + timeout_s
        self._polls = 0

    def pause_s(self, current: JobOut) -> float | None:
        """Seconds until the next poll, ``None`` for a final state; :class:`JobTimeout` when
        the job is still queued/running at the deadline."""
        self._polls += 1
        if current.state in FINAL_JOB_STATES:
            return None
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            message = f"job {self._job_id} still {current.state} after {self._timeout_s} s"
            raise JobTimeout(message, current)
        return min(backoff_delay_s(self._polls, POLL, 0.0), remaining)


EntryLike = EntryIn | MessageWire | Mapping[str, Any]


def entry_batches(entries: Sequence[EntryLike]) -> list[list[dict[str, Any]]]:
    """Request bodies for an append: each entry as a wire dict with an id (a fresh UUID when
    it has none, so a retried request is recognised as the same append), in batches of at most
    :data:`MAX_BATCH`. A bare :class:`MessageWire` (or a dict with a ``role``) becomes a
    ``message`` entry.

    Raises :class:`InvalidRequest` naming the entry and field (``entries[2].message.role``)
    for an entry that is not a valid ``EntryIn``, and for ``entries`` that is not a list.
    """
    if isinstance(entries, str | bytes | Mapping | BaseModel) or not isinstance(entries, Sequence):
        raise refused("entries", f"expected a list of entries, got {type(entries).__name__}")
    bodies: list[dict[str, Any]] = []
    for index, item in enumerate(entries):
        try:
            entry = _as_entry(item)
        except ValidationError as exc:
            raise from_validation(exc, f"entries[{index}]") from None
        if entry.id is None:
            entry = entry.model_copy(update={"id": f"e-{uuid.uuid4().hex}"})
        bodies.append(entry.model_dump(mode="json", exclude_none=True))
    return [bodies[i : i + MAX_BATCH] for i in range(0, len(bodies), MAX_BATCH)]


def _as_entry(item: EntryLike) -> EntryIn:
    if isinstance(item, EntryIn):
        return item
    if isinstance(item, MessageWire):
        return EntryIn(kind="message", message=item)
    if isinstance(item, Mapping) and "role" in item:
        return EntryIn.model_validate({"kind": "message", "message": item})
    # Anything else (a dict, or a wrong type) is validated as an entry, so a wrong type is
    # refused with the model's message too.
    return EntryIn.model_validate(item)


def dump(model: BaseModel) -> dict[str, Any]:
    """A request model as its JSON body (``None`` fields left out)."""
    return model.model_dump(mode="json", exclude_none=True)
