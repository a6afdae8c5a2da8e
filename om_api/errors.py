"""Every error the API can meet, mapped to one status code and an :class:`ErrorBody`.

The rule: input problems are 4xx with the reason, never 500. Another tenant's session and a
missing one are the same 404 (never a 403 that would confirm it exists). Redis or the database
being unreachable is a 503 with ``Retry-After``. Only a genuine server fault is a 500, and its
body says nothing about internals.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Final

import pydantic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from om_api.logging import redact_text
from om_api.schemas import ErrorBody
from om_core import errors as core
from om_workers import errors as workers

log = logging.getLogger("om_api")

RETRY_AFTER_S: Final = 5
"""``Retry-After`` (seconds) on a 503: about one Redis restart or database lock wait."""

# Most specific first is not needed: lookup walks the exception's MRO, so a subclass listed
# here wins over its base.
STATUS_BY_ERROR: Final[dict[type[BaseException], tuple[int, str]]] = {
    # om_workers
    workers.InvalidApiKeyError: (401, "unauthorized"),
    workers.NotFoundError: (404, "not_found"),
    workers.AlreadyExistsError: (409, "conflict"),
    workers.EntryConflictError: (409, "conflict"),
    workers.StaleEpochError: (409, "conflict"),
    workers.InvalidJobStateError: (409, "conflict"),
    workers.InvalidEntryError: (422, "invalid_input"),
    workers.StoreUnavailableError: (503, "unavailable"),
    workers.CoordinationError: (503, "unavailable"),
    # om_core: everything the core refuses is about the request (fail closed), so 4xx.
    core.ObservationalMemoryError: (422, "invalid_input"),
    core.UnknownCursorError: (422, "invalid_input"),
    core.UnknownMemoryRefError: (422, "invalid_input"),
    core.UnknownScopeError: (404, "not_found"),
    core.DuplicateScopeError: (409, "conflict"),
    core.ScopeStateError: (409, "conflict"),
    # The leaf moved under a scope or drop append (a concurrent writer): retry the request.
    core.AppendNotVisibleError: (409, "conflict"),
    core.WrongSessionError: (409, "conflict"),
    pydantic.ValidationError: (422, "invalid_input"),
}


class ApiError(Exception):
    """An error a route raises directly with its status, code and reason."""

    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail


def classify(exc: BaseException) -> tuple[int, str] | None:
    """The (status, code) of a known error type, ``None`` for anything else (a 500)."""
    for cls in type(exc).__mro__:
        found = STATUS_BY_ERROR.get(cls)
        if found is not None:
            return found
    return None


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
) -> JSONResponse:
    """An :class:`ErrorBody` response; ``detail`` is redacted of every exact secret."""
    body = ErrorBody(
        error=error,
        detail=redact_text(detail, secrets),
        request_id=_request_id(request),
        errors=errors,
    )
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else None
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True), status_code=status, headers=headers
    )


def _secrets(request: Request) -> tuple[str, ...]:
    state = getattr(request.app.state, "om", None)
    found = getattr(state, "secrets", ())
    return tuple(found)


def _validation_items(raw: Iterable[Any]) -> list[dict[str, Any]]:
    # Only location, message and type: the offending input could be large or a secret.
    items: list[dict[str, Any]] = []
    for item in raw:
        if isinstance(item, dict):
            location = [str(part) for part in item.get("loc", ())]
            items.append(
                {"loc": location, "msg": str(item.get("msg", "")), "type": item.get("type")}
            )
    return items


def _reason(items: list[dict[str, Any]]) -> str:
    parts = [f"{'.'.join(i['loc']) or 'body'}: {i['msg']}" for i in items[:5]]
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
        items = _validation_items(raw)
        return error_response(
            request, 422, "invalid_input", _reason(items), errors=items, secrets=_secrets(request)
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
        return error_response(request, exc.status, exc.error, exc.detail, secrets=_secrets(request))

    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        found = classify(exc)
        if found is None:
            # A server fault: log it (redacted by the log formatter), answer without internals.
            log.exception("unhandled error", extra={"error_type": type(exc).__name__})
            return error_response(request, 500, "internal_error", "internal server error")
        status, error = found
        if isinstance(exc, pydantic.ValidationError):
            return await on_validation(request, exc)
        return error_response(request, status, error, str(exc), secrets=_secrets(request))

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(ApiError, on_api_error)
    # Known trees are handled inside the routing layer (so request logging and metrics see a
    # normal response); a bare ``Exception`` handler runs in the outermost server-error layer.
    for known in (workers.OMWorkersError, core.ObservationalMemoryError, pydantic.ValidationError):
        app.add_exception_handler(known, on_error)
    app.add_exception_handler(Exception, on_error)
