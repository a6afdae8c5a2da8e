"""How console pages fail: as HTML pages, with the status the API would answer.

:func:`guarded` turns an error of the service's tree raised by a page into its error page
(another tenant's session: the same 404 as a missing one; bad input: 4xx with the reason;
never a 500 for input). :func:`install_handlers` covers what is raised before a page runs: no
sign-in (a 303 to the sign-in page) and a refused form (403).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, ParamSpec

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from om_api.server.console.render import error_of, error_page
from om_api.server.console.signin import FormRefused, SignInRequired, Viewer
from om_api.server.errors import ApiError
from om_api.server.state import ApiState
from om_core.errors import NotFoundError, ObservationalMemoryError
from om_workers.logs import redact_text

log = logging.getLogger("om_api.console")
P = ParamSpec("P")


class NotVisible(NotFoundError):
    """A tenant the viewer may not see: answered exactly like a missing session (404)."""


def visible_tenant(state: ApiState, viewer: Viewer, tenant_id: str) -> None:
    """Raise :class:`NotVisible` unless ``viewer`` may see ``tenant_id``'s data."""
    if not viewer.sees(tenant_id):
        raise NotVisible("no such session")


def _answer(exc: ObservationalMemoryError, state: ApiState | None, viewer: Any) -> Response:
    secrets = state.secrets if state is not None else frozenset()
    detail = redact_text(str(exc), secrets)
    if isinstance(exc, SignInRequired):
        return RedirectResponse("/console/login", status_code=303)
    if isinstance(exc, FormRefused):
        return error_page(403, detail, viewer)
    if isinstance(exc, NotVisible):
        return error_page(404, "no such session", viewer)
    if isinstance(exc, ApiError):
        return error_page(exc.status, redact_text(exc.detail, secrets), viewer)
    answer = error_of(exc, detail)
    if answer.status_code >= 500:
        log.error("console page failed: %s", detail)
    return answer


def guarded(page: Callable[P, Response]) -> Callable[P, Response]:
    """Wrap a page so that an error of the service's tree renders as an error page."""

    @functools.wraps(page)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Response:
        try:
            return page(*args, **kwargs)
        except ObservationalMemoryError as exc:
            state = kwargs.get("state")
            return _answer(
                exc, state if isinstance(state, ApiState) else None, kwargs.get("viewer")
            )

    return wrapper


def install_handlers(app: FastAPI) -> None:
    """Answer a missing sign-in with the sign-in page and a refused form with a 403 page,
    wherever in a console request they are raised (a dependency runs before the page)."""

    async def on_signin(request: Request, exc: Exception) -> Response:
        return RedirectResponse("/console/login", status_code=303)

    async def on_form(request: Request, exc: Exception) -> HTMLResponse:
        return error_page(403, str(exc))

    app.add_exception_handler(SignInRequired, on_signin)
    app.add_exception_handler(FormRefused, on_form)
