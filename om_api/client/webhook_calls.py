"""The admin calls of a tenant's signed webhooks (``/v1/admin/tenants/{id}/webhooks``), each
built once for the sync and async clients (:mod:`om_api.client.calls` holds the others). Each
needs the client's ``admin_token``."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from om_api.client import checks
from om_api.client.core import Call, dump
from om_api.schemas import (
    CreateWebhookRequest,
    WebhookDeliveriesOut,
    WebhookDeliveryOut,
    WebhookEndpointOut,
    WebhookEndpointsOut,
)


def _hooks(tenant_id: str) -> str:
    tenant = quote(checks.path_id("tenant_id", tenant_id), safe="")
    return f"/v1/admin/tenants/{tenant}/webhooks"


def add_webhook(
    tenant_id: str,
    url: str,
    event_types: Sequence[str] | None = None,
    secret: str | None = None,
) -> Call[WebhookEndpointOut]:
    """Register an endpoint of the tenant; the answer's ``secret`` (generated unless given)
    is shown this once. :class:`InvalidRequest` for a URL the service will not call (private,
    loopback or link-local unless allowed) or a malformed secret; :class:`NotFound` for an
    unknown tenant."""
    values: dict[str, object] = {"url": url, "secret": secret}
    if event_types is not None:
        values["event_types"] = list(event_types)
    body = checks.model(CreateWebhookRequest, **values)
    return Call(
        "POST", _hooks(tenant_id), WebhookEndpointOut, json=dump(body), idempotent=False,
        admin=True,
    )  # fmt: skip


def list_webhooks(tenant_id: str) -> Call[WebhookEndpointsOut]:
    """The tenant's endpoints, oldest first, without secrets. :class:`NotFound`."""
    return Call("GET", _hooks(tenant_id), WebhookEndpointsOut, admin=True)


def remove_webhook(tenant_id: str, endpoint_id: str) -> Call[str]:
    """Delete an endpoint and its deliveries. :class:`NotFound` when the tenant has none of
    that id."""
    endpoint = quote(checks.path_id("endpoint_id", endpoint_id), safe="")
    return Call("DELETE", f"{_hooks(tenant_id)}/{endpoint}", str, admin=True)


def webhook_deliveries(
    tenant_id: str, *, endpoint_id: str | None = None, failing: bool = False, limit: int = 100
) -> Call[WebhookDeliveriesOut]:
    """The tenant's newest deliveries, newest first (of one endpoint; with ``failing``, only
    those not delivered whose last attempt failed). :class:`NotFound`."""
    params: dict[str, object] = {"failing": failing, "limit": limit}
    if endpoint_id is not None:
        params["endpoint"] = checks.path_id("endpoint_id", endpoint_id)
    path = f"{_hooks(tenant_id)}/deliveries"
    return Call("GET", path, WebhookDeliveriesOut, params=params, admin=True)


def redeliver_webhook(tenant_id: str, delivery_id: str) -> Call[WebhookDeliveryOut]:
    """Send a delivery again (same ``webhook-id``, fresh attempts). :class:`NotFound`."""
    delivery = quote(checks.path_id("delivery_id", delivery_id), safe="")
    path = f"{_hooks(tenant_id)}/deliveries/{delivery}/redeliver"
    return Call("POST", path, WebhookDeliveryOut, admin=True)
