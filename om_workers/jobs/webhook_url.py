"""Which URLs a webhook may call: checked when an endpoint is registered and again before
every attempt, since a name may resolve elsewhere later (no server-side request forgery).

Every address the host resolves to must be public (:func:`om_core.policy.webhooks.refused_address`)
unless the operator allows private ones (``OM_WEBHOOK_ALLOW_PRIVATE``, for a receiver on the
same host or network). Redirects are never followed, so an answer cannot point a delivery
elsewhere.
"""

from __future__ import annotations

import socket

import httpx

from om_core.errors import InvalidWebhookUrlError
from om_core.policy.webhooks import refused_address

MAX_URL_CHARS = 2048


def check_url_shape(url: str) -> httpx.URL:
    """The parsed URL when its shape is acceptable: ``http`` or ``https``, a host, no user
    info, at most :data:`MAX_URL_CHARS`. Raises :class:`InvalidWebhookUrlError`."""
    if len(url) > MAX_URL_CHARS:
        raise InvalidWebhookUrlError(f"a webhook URL has at most {MAX_URL_CHARS} characters")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise InvalidWebhookUrlError("the webhook URL cannot be parsed") from None
    if parsed.scheme not in ("http", "https"):
        raise InvalidWebhookUrlError("a webhook URL is http:// or https://")
    if not parsed.host:
        raise InvalidWebhookUrlError("a webhook URL names a host")
    if parsed.userinfo:
        raise InvalidWebhookUrlError("a webhook URL carries no user or password")
    return parsed


def check_url(url: str, *, allow_private: bool) -> None:
    """Refuse a URL the service will not call (see the module docstring). Raises
    :class:`InvalidWebhookUrlError` saying why: bad shape, a host that does not resolve, or
    one that resolves to a refused address (naming the kind of address, not the address)."""
    parsed = check_url_shape(url)
    if allow_private:
        return
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        found = socket.getaddrinfo(parsed.host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        raise InvalidWebhookUrlError(f"the webhook host {parsed.host!r} does not resolve") from None
    for _family, _type, _proto, _name, sockaddr in found:
        why = refused_address(str(sockaddr[0]))
        if why is not None:
            raise InvalidWebhookUrlError(
                f"the webhook host {parsed.host!r} resolves to a {why}; "
                "an operator may allow it with OM_WEBHOOK_ALLOW_PRIVATE=true"
            )


__all__ = ["MAX_URL_CHARS", "check_url", "check_url_shape"]
