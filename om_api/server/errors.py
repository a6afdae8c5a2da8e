"""Every error the API can meet, mapped to one status code and an :class:`ErrorBody`.

The rule: input problems are 4xx with the reason, never 500. Another tenant's session and a
missing one are the same 404 (never a 403 that would confirm it exists). Redis or the database
being unreachable is a 503 with ``Retry-After``. Only a genuine server fault is a 500, and its
body says nothing about internals.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

import pydantic
import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from om_api.schemas import ErrorBody
from om_api.server.logging import redact_text
from om_core import errors as core
from om_workers import errors as workers

log = logging.getLogger("om_api")

RETRY_AFTER_S: Final = 5
"""``Retry-After`` (seconds) on a 503: about one Redis restart or database lock wait."""

# Keyed on the categories of :mod:`om_core.errors`, plus the few errors whose answer differs
# from their category's (or that have none). Lookup walks the exception's MRO, so the first
# listed class in it wins: a subclass listed here over its base, and for an error in two
# listed classes (``LockLostError``: a coordination error and fenced out), the base it names
# first. An error of the tree in no listed class is a server fault: 500.
STATUS_BY_ERROR: Final[dict[type[BaseException], tuple[int, str]]] = {
    core.InvalidInputError: (422, "invalid_input"),
    core.NotFoundError: (404, "not_found"),
    core.ConflictError: (409, "conflict"),
    core.UnauthorizedError: (401, "unauthorized"),
    core.UnavailableError: (503, "unavailable"),
    # The core fails closed on what it was given: a cap it cannot trim to, a worker run it
    # refused. Both are about the request, so 4xx.
    core.CapExceededError: (422, "invalid_input"),
    core.WorkerRunError: (422, "invalid_input"),
    # Any Redis failure, transient or not (a lost lock, a script error): the API's Redis work
    # is coordination, so retrying later is what the caller can do.
    workers.CoordinationError: (503, "unavailable"),
    # Foreign, at the edge: a model the route validates itself.
    pydantic.ValidationError: (422, "invalid_input"),
}


REFUSED_BY_DATABASE: Final = (
    "the database refused a value of this request (text or a number it cannot store); "
    "nothing was written"
)
"""The detail of a 422 for a :class:`~om_workers.errors.StoreError` caused by a data error.

The request edge refuses such values first (:func:`om_api.schemas.find_unstorable`); this is
the second line of defence, and it never quotes the driver's message (which may echo the
value)."""


def refused_by_database(exc: BaseException) -> bool:
    """True for a store error whose cause is the database (or its driver) refusing a value:
    SQLAlchemy's ``DataError`` (psycopg's ``UntranslatableCharacter``,
    ``InvalidTextRepresentation``, a NUL in a text column ...) or a text encoding error."""
    if not isinstance(exc, workers.StoreError):
        return False
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sqlalchemy.exc.DataError | UnicodeError):
            return True
        current = current.__cause__ or current.__context__
    return False


class ApiError(core.ObservationalMemoryError):
    """An error a route raises directly with its HTTP ``status``, machine ``error`` code,
    ``detail`` and extra ``headers``: for an answer that differs from what
    :data:`STATUS_BY_ERROR` gives the error's category (an unknown entry named as a page
    cursor is a 422, not the 404 of a missing resource) or for a refusal of the edge itself
    (a missing API key, a rate limit). Its own handler answers it, never :func:`classify`."""

    def __init__(
        self, status: int, error: str, detail: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail
        self.headers = headers


def classify(exc: BaseException) -> tuple[int, str] | None:
    """The (status, code) of a known error type, ``None`` for anything else (a 500)."""
    for cls in type(exc).__mro__:
        found = STATUS_BY_ERROR.get(cls)
        if found is not None:
            return found
    if refused_by_database(exc):
        return 422, "invalid_input"
    return None


def _encodable(text: str) -> str:
    # A lone surrogate cannot be encoded as UTF-8: the JSON answer itself would fail (a 500).
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _request_id(request: Request) -> str | None:
    value = getattr(request.state, "request_id", None)
    return value if isinstance(value, str) else None


def error_response(
    request: Request,
    status: int,
    error: str,
    detail: str,
    *,
    errors: list[dict[str, Any]] | None = None,
    secrets: Iterable[str] = (),
    headers: dict[str, str] | None = None,
    line: int | None = None,
) -> JSONResponse:
    """An :class:`ErrorBody` response; ``detail`` is redacted of every exact secret;
    ``headers`` are added (a 429's ``Retry-After``)."""
    body = ErrorBody(
        error=error,
        detail=_encodable(redact_text(detail, secrets)),
        request_id=_request_id(request),
        errors=errors,
        line=line,
    )
    if status == 503:
        headers = {"Retry-After": str(RETRY_AFTER_S), **(headers or {})}
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer", **(headers or {})}
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True), status_code=status, headers=headers
    )


def _secrets(request: Request) -> tuple[str, ...]:
    state = getattr(request.app.state, "om", None)
    found = getattr(state, "secrets", ())
    return tuple(found)


_QUOTED_KEY = re.compile(r'[.\s"\[\]]')


def render_loc(loc: Sequence[Any]) -> str:
    """A validation location as a path: ``body.entries[0].message.content``; a key that
    would read ambiguously (dots, spaces, brackets, empty) is quoted: ``data["a.b"]``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif str(part) and not _QUOTED_KEY.search(str(part)):
            path += f".{part}" if path else str(part)
        else:
            path += f"[{json.dumps(str(part))}]"
    return path or "body"


def _validation_items(raw: Iterable[Any], secrets: Iterable[str] = ()) -> list[dict[str, Any]]:
    # Only location, path, message and type, never the input (it could be large, a secret or
    # not encodable); a secret used as a key of free-form JSON is redacted from the location.
    secrets = tuple(secrets)

    def clean(text: str) -> str:
        return _encodable(redact_text(text, secrets))

    items: list[dict[str, Any]] = []
    for item in raw:
        if isinstance(item, dict):
            loc = tuple(item.get("loc", ()))
            if item.get("type") == "json_invalid":
                # FastAPI's location of a JSON syntax error is (body, character offset).
                offset = next((p for p in loc if isinstance(p, int)), None)
                where = f" at character {offset}" if offset is not None else ""
                error = str((item.get("ctx") or {}).get("error", "")) or "not JSON"
                msg, path = f"invalid JSON{where}: {error}", "body"
                loc = loc[:1]
            else:
                msg, path = str(item.get("msg", "")), render_loc(loc)
            items.append(
                {
                    "loc": [clean(str(part)) for part in loc],
                    "msg": clean(msg),
                    "type": item.get("type"),
                    "path": clean(path),
                }
            )
    return items


def _reason(items: list[dict[str, Any]]) -> str:
    parts = [f"{i['path']}: {i['msg']}" for i in items[:5]]
    more = f" (+{len(items) - 5} more)" if len(items) > 5 else ""
    return "; ".join(parts) + more if parts else "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that turn every exception into an :class:`ErrorBody`."""

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        raw = (
            exc.errors()
            if isinstance(exc, RequestValidationError | pydantic.ValidationError)
            else ()
        )
        secrets = _secrets(request)
        items = _validation_items(raw, secrets)
        return error_response(
            request, 422, "invalid_input", _reason(items), errors=items, secrets=secrets
        )

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        codes = {
            401: "unauthorized",
            404: "not_found",
            405: "method_not_allowed",
            413: "payload_too_large",
        }
        error = codes.get(exc.status_code, "http_error")
        return error_response(request, exc.status_code, error, str(exc.detail))

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return error_response(
            request,
            exc.status,
            exc.error,
            exc.detail,
            secrets=_secrets(request),
            headers=exc.headers,
        )

    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        found = classify(exc)
        if found is None:
            # A server fault: log it (redacted by the log formatter), answer without internals.
            log.exception("unhandled error", extra={"error_type": type(exc).__name__})
            return error_response(request, 500, "internal_error", "internal server error")
        status, error = found
        if isinstance(exc, pydantic.ValidationError):
            return await on_validation(request, exc)
        if refused_by_database(exc):
            # The edge should have refused the value: say so in the log, never the value.
            log.warning("database refused a value", extra={"error_type": type(exc).__name__})
            return error_response(request, status, error, REFUSED_BY_DATABASE)
        # An import's refusal names its line (ImportLineError, ImportClashError).
        line = getattr(exc, "line", None)
        return error_response(
            request,
            status,
            error,
            str(exc),
            secrets=_secrets(request),
            line=line if isinstance(line, int) else None,
        )

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(ApiError, on_api_error)
    # Known trees are handled inside the routing layer (so request logging and metrics see a
    # normal response); a bare ``Exception`` handler runs in the outermost server-error layer.
    for known in (core.ObservationalMemoryError, pydantic.ValidationError):
        app.add_exception_handler(known, on_error)
    app.add_exception_handler(Exception, on_error)
