"""Signing in and out of the console, its entry point and its static files."""

from __future__ import annotations

import hmac
from importlib import resources
from typing import Final

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from om_api.server.auth import MAX_KEY_CHARS
from om_api.server.console.render import SECURITY_HEADERS, page
from om_api.server.console.signin import (
    COOKIE,
    COOKIE_PATH,
    LOGIN_COOKIE,
    SignInRequired,
    check_form_token,
    current_viewer,
    new_login_token,
    read_form,
    signins,
)
from om_api.server.state import ApiState, State
from om_workers.errors import InvalidApiKeyError

router = APIRouter(prefix="/console", include_in_schema=False)

STATIC: Final = {"console.css": "text/css", "console.js": "text/javascript"}
LOGIN_TTL_S: Final = 3600
"""How long a sign-in form stays valid, seconds."""


def _static(name: str) -> bytes:
    return resources.files("om_api.server.console").joinpath("static", name).read_bytes()


_FILES: Final = {name: _static(name) for name in STATIC}


@router.get("/static/{name}")
def static(name: str) -> Response:
    """The console's stylesheet and its one small script (404 for anything else)."""
    if name not in _FILES:
        return Response(status_code=404)
    headers = {"Cache-Control": "max-age=3600", "X-Content-Type-Options": "nosniff"}
    return Response(_FILES[name], media_type=STATIC[name], headers=headers)


@router.get("", response_class=HTMLResponse)
@router.get("/", response_class=HTMLResponse)
def home(request: Request, state: State) -> Response:
    """The admin's tenants, a tenant key's sessions, or the sign-in page."""
    try:
        viewer = current_viewer(request, state)
    except SignInRequired:
        return RedirectResponse("/console/login", status_code=303)
    if viewer.admin or viewer.tenant_id is None:
        return RedirectResponse("/console/admin", status_code=303)
    return RedirectResponse(f"/console/tenants/{viewer.tenant_id}/sessions", status_code=303)


def _login_page(status: int = 200, problem: str | None = None) -> Response:
    token = new_login_token()
    answer = page("login.html", status, form_token=token, problem=problem, viewer=None)
    answer.set_cookie(
        LOGIN_COOKIE,
        token,
        max_age=LOGIN_TTL_S,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
    )
    return answer


@router.get("/login", response_class=HTMLResponse)
def login_form() -> Response:
    """The sign-in form: an API key (one tenant) or the admin token (every tenant)."""
    return _login_page()


def _sign_in(state: ApiState, credential: str) -> str | None:
    """The cookie value of a new sign-in for ``credential``; ``None`` when it is neither the
    admin token nor a live API key."""
    if not credential or len(credential) > MAX_KEY_CHARS:
        return None
    expected = state.settings.api.admin_token
    if expected and hmac.compare_digest(credential.encode(), expected.encode()):
        return signins(state).create(admin=True, tenant_id=None, key_id=None)
    try:
        tenant_id, key_id = state.keys.resolve(credential)
    except InvalidApiKeyError:
        return None
    # A real key joins the redaction set at once, as the API's bearer check does.
    state.registry.add(credential)
    return signins(state).create(admin=False, tenant_id=tenant_id, key_id=key_id)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, state: State) -> Response:
    """Sign in: 303 to the console with the sign-in cookie set; 401 and the form again for a
    credential that is neither a live API key nor the admin token (never echoed)."""
    form = await read_form(request)
    check_form_token(form.get("form_token"), request.cookies.get(LOGIN_COOKIE, ""))
    cookie = await run_in_threadpool(_sign_in, state, form.get("credential", "").strip())
    if cookie is None:
        return _login_page(401, "That is neither a valid API key nor the admin token.")
    answer = RedirectResponse("/console/", status_code=303, headers=SECURITY_HEADERS)
    answer.set_cookie(
        COOKIE,
        cookie,
        max_age=state.settings.api.console_session_ttl_s,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    answer.delete_cookie(LOGIN_COOKIE, path=COOKIE_PATH)
    return answer


@router.post("/logout")
async def logout(request: Request, state: State) -> Response:
    """Sign out: the sign-in is ended in Redis and its cookie cleared."""
    viewer = await run_in_threadpool(current_viewer, request, state)
    form = await read_form(request)
    check_form_token(form.get("form_token"), viewer.form_token)
    await run_in_threadpool(signins(state).end, viewer.cookie)
    answer = RedirectResponse("/console/login", status_code=303)
    answer.delete_cookie(COOKIE, path=COOKIE_PATH)
    return answer
