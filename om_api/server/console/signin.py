"""Who is looking: the console's sign-in cookie, the viewer it names, and form tokens.

The cookie (``om_console``: HttpOnly, SameSite=Strict, path ``/console``, Secure over HTTPS)
holds an opaque random value; Redis maps it to the tenant and API key id, or to the admin
(:mod:`om_workers.coordination.console_signin`). The API key or admin token is read once, from
the sign-in form's body, and never written to a cookie, a URL or a page.

Every POST form carries the sign-in's form token besides the SameSite cookie; the sign-in form,
which has no sign-in yet, carries a token matched against a short-lived cookie of its own.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from typing import Annotated, Final
from urllib.parse import parse_qs

from fastapi import Depends, Request

from om_api.server.auth import MAX_KEY_CHARS
from om_api.server.limits import request_class
from om_api.server.state import ApiState, State
from om_core.errors import InvalidInputError, UnauthorizedError
from om_workers.coordination.console_signin import ConsoleSignIn, ConsoleSignIns

COOKIE: Final = "om_console"
LOGIN_COOKIE: Final = "om_console_login"
COOKIE_PATH: Final = "/console"
MAX_FORM_BYTES: Final = 4096
"""The largest console form body read, bytes (a key, a token and a few flags)."""


class SignInRequired(UnauthorizedError):
    """No valid sign-in: the console answers with its sign-in page (a 303 to it)."""


class FormRefused(InvalidInputError):
    """A POST form without the right form token, or a body that is not a small form (403)."""


@dataclass(frozen=True, slots=True)
class Viewer:
    """The signed-in viewer: the admin (every tenant) or one tenant through one API key."""

    signin: ConsoleSignIn
    cookie: str

    @property
    def admin(self) -> bool:
        """True for the admin token's sign-in."""
        return self.signin.admin

    @property
    def tenant_id(self) -> str | None:
        """The tenant of an API key's sign-in; ``None`` for the admin."""
        return self.signin.tenant_id

    @property
    def form_token(self) -> str:
        """The token every POST form of this sign-in carries."""
        return self.signin.form_token

    def sees(self, tenant_id: str) -> bool:
        """Whether this viewer may see ``tenant_id``'s data (never another tenant's)."""
        return self.signin.admin or self.signin.tenant_id == tenant_id


def signins(state: ApiState) -> ConsoleSignIns:
    """The sign-ins in the API's Redis, with the configured lifetime."""
    return ConsoleSignIns(state.redis, state.settings.api.console_session_ttl_s)


def _key_is_live(state: ApiState, signin: ConsoleSignIn) -> bool:
    if signin.admin:
        # The admin token may have changed since: a sign-in made with another one is void.
        return bool(state.settings.api.admin_token)
    if signin.tenant_id is None or signin.key_id is None:
        return False
    keys = state.accounts.list_api_keys(signin.tenant_id)
    return any(k.key_id == signin.key_id and k.revoked_at is None for k in keys)


def current_viewer(request: Request, state: State) -> Viewer:
    """The viewer of the request's cookie, after spending one request of the key's rate limit.

    Raises :class:`SignInRequired` without a cookie, for an unknown or expired one, and when
    the API key was revoked since (the sign-in is ended then); a 429
    :class:`~om_api.server.limits.RateLimitedError` over the key's limit.
    """
    cookie = request.cookies.get(COOKIE, "")
    if not cookie or len(cookie) > MAX_KEY_CHARS:
        raise SignInRequired("sign in first")
    store = signins(state)
    signin = store.get(cookie)
    if signin is None:
        raise SignInRequired("the sign-in expired")
    if not _key_is_live(state, signin):
        store.end(cookie)
        raise SignInRequired("the API key was revoked")
    if signin.tenant_id is not None and signin.key_id is not None:
        template = str(getattr(request.scope.get("route"), "path", request.url.path))
        spent = request_class(request.method, template)
        state.limits.check(signin.tenant_id, signin.key_id, spent)
    return Viewer(signin, cookie)


CurrentViewer = Annotated[Viewer, Depends(current_viewer)]


async def read_form(request: Request) -> dict[str, str]:
    """The request's urlencoded form, one value per field (the first). Raises
    :class:`FormRefused` for a body over :data:`MAX_FORM_BYTES` or one that is not a form."""
    if request.headers.get("content-type", "").split(";")[0].strip() != (
        "application/x-www-form-urlencoded"
    ):
        raise FormRefused("not a form")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormRefused(f"form over {MAX_FORM_BYTES} bytes")
    try:
        parsed = parse_qs(body.decode("utf-8"), max_num_fields=16, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        raise FormRefused("not a form") from None
    return {name: values[0] for name, values in parsed.items() if values}


def check_form_token(given: str | None, expected: str) -> None:
    """Raise :class:`FormRefused` unless ``given`` is ``expected`` (constant time)."""
    if not given or not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        raise FormRefused("the form is out of date or was not sent by this console; reload it")


def new_login_token() -> str:
    """A fresh token for the sign-in form (and its cookie)."""
    return secrets.token_urlsafe(24)
