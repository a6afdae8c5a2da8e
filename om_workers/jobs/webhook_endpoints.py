"""Registering a tenant's webhook endpoint, the same way for the admin route and the command
line: the URL checked (:func:`~om_workers.jobs.webhook_url.check_url`), the secret checked or
generated, at most :data:`MAX_ENDPOINTS_PER_TENANT` endpoints a tenant."""

from __future__ import annotations

import secrets as random_source

from om_core.errors import CapExceededError
from om_core.policy.webhooks import EVENT_TYPES, EventType, secret_from_bytes, secret_key
from om_workers.jobs.webhook_url import check_url
from om_workers.store import SqlStore
from om_workers.store.repositories.webhooks import WebhookEndpoint

MAX_ENDPOINTS_PER_TENANT = 20
"""Endpoints one tenant may register: each event is sent to each of them."""
GENERATED_SECRET_BYTES = 32


def register_endpoint(
    store: SqlStore,
    tenant_id: str,
    url: str,
    *,
    event_types: tuple[EventType, ...] = EVENT_TYPES,
    secret: str | None = None,
    allow_private: bool = False,
) -> WebhookEndpoint:
    """Register an endpoint of the tenant; it, with its secret (``whsec_`` + base64 of 32
    random bytes when none is given), which is shown this once.

    Raises :class:`~om_core.errors.InvalidWebhookUrlError` for a URL the service will not
    call, :class:`~om_core.errors.InvalidInputError` for a malformed secret (never quoting
    it), :class:`~om_core.errors.CapExceededError` past :data:`MAX_ENDPOINTS_PER_TENANT` and
    :class:`~om_workers.errors.TenantNotFoundError` for an unknown tenant.
    """
    # The tenant first: an unknown one is a 404 before any name is resolved.
    if len(store.webhooks.endpoints(tenant_id)) >= MAX_ENDPOINTS_PER_TENANT:
        raise CapExceededError(f"a tenant has at most {MAX_ENDPOINTS_PER_TENANT} webhook endpoints")
    if secret is None:
        secret = secret_from_bytes(random_source.token_bytes(GENERATED_SECRET_BYTES))
    else:
        secret_key(secret)
    check_url(url, allow_private=allow_private)
    kinds = tuple(dict.fromkeys(event_types))
    return store.webhooks.add_endpoint(tenant_id, url, secret, kinds)


__all__ = ["MAX_ENDPOINTS_PER_TENANT", "register_endpoint"]
