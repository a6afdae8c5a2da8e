"""Webhook endpoints and deliveries on the wire, shared by the admin routes and ``om webhooks``
(which import no web framework for them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from om_api.schemas import WebhookDeliveryOut, WebhookEndpointOut

if TYPE_CHECKING:
    from om_workers.store.repositories.webhooks import WebhookDelivery, WebhookEndpoint


def endpoint_out(endpoint: WebhookEndpoint) -> WebhookEndpointOut:
    """An endpoint on the wire; its secret only when the endpoint carries it (creation)."""
    return WebhookEndpointOut(
        id=endpoint.id,
        tenant_id=endpoint.tenant_id,
        url=endpoint.url,
        event_types=list(endpoint.event_types),
        enabled=endpoint.enabled,
        created_at=endpoint.created_at,
        secret=endpoint.secret,
    )


def delivery_out(delivery: WebhookDelivery) -> WebhookDeliveryOut:
    """A delivery on the wire (never its payload)."""
    return WebhookDeliveryOut(
        id=delivery.id,
        endpoint_id=delivery.endpoint_id,
        event_type=delivery.event_type,
        session_id=delivery.session_id,
        state=delivery.state,
        attempts=delivery.attempts,
        last_status=delivery.last_status,
        last_error=delivery.last_error,
        next_attempt_at=delivery.next_attempt_at,
        created_at=delivery.created_at,
        delivered_at=delivery.delivered_at,
    )


__all__ = ["delivery_out", "endpoint_out"]
