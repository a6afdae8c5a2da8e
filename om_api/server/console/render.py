"""HTML rendering of the console: one Jinja2 environment (autoescaping every value), the
headers every console answer carries, and the error page.

Every value a template shows has been redacted by the view that built it; autoescaping makes
sure no stored text (a message, a label) can become markup or script on the page.
"""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources
from typing import Any, Final

from fastapi.responses import HTMLResponse
from jinja2 import Environment, FunctionLoader, StrictUndefined, select_autoescape

from om_api.server.errors import classify
from om_core.errors import ObservationalMemoryError

SECURITY_HEADERS: Final = {
    # Scripts and styles only from the console's own static files: no inline script, no CDN.
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _template_source(name: str) -> str | None:
    path = resources.files("om_api.server.console").joinpath("templates", name)
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _moment(value: datetime | str) -> datetime | None:
    # An entry's created_at is the host's text: one that is no ISO time is shown as it is.
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def utc_text(value: datetime | str | None) -> str:
    """``YYYY-MM-DD HH:MM:SS UTC`` (what a page shows without JavaScript); empty for ``None``,
    the text itself for a string that is no ISO-8601 time."""
    if value is None:
        return ""
    moment = _moment(value)
    return str(value) if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(value: datetime | str | None) -> str:
    """The ISO-8601 form of a time for ``<time datetime>`` (UTC); empty for ``None`` or a
    string that is no time."""
    moment = None if value is None else _moment(value)
    return "" if moment is None else moment.isoformat()


ENV: Final = Environment(
    loader=FunctionLoader(_template_source),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters["utc"] = utc_text
ENV.filters["iso"] = iso


def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """The template ``name`` rendered with ``context``, with the console's headers."""
    html = ENV.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def error_page(status: int, detail: str, viewer: Any = None) -> HTMLResponse:
    """The error page: ``status`` and a reason a person can act on (already redacted)."""
    return page("error.html", status, code=status, detail=detail, viewer=viewer)


def error_of(exc: ObservationalMemoryError, detail: str) -> HTMLResponse:
    """The error page for an error of the service's tree: the status the API answers for it
    (another tenant's session is the same 404 as a missing one), 500 for an unknown kind."""
    found = classify(exc)
    status = found[0] if found is not None else 500
    return error_page(status, detail if status != 500 else "the console met an internal error")
