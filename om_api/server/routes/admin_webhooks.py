"""Admin routes (``OM_ADMIN_TOKEN``) for a tenant's signed webhooks: register, list and delete
endpoints, list deliveries (with their failures), redeliver one.

An endpoint's secret is in the creating answer only: listings, logs and errors never show it.
A URL whose host resolves to a private, loopback or link-local address is a 422 unless the
operator allows it (``OM_WEBHOOK_ALLOW_PRIVATE``). Another tenant's endpoint or delivery is a
404, as is an unknown one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from om_api.schemas import (
    MAX_WEBHOOK_DELIVERIES,
    PATH_ID_PATTERN,
    CreateWebhookRequest,
    WebhookDeliveriesOut,
    WebhookDeliveryOut,
    WebhookEndpointOut,
    WebhookEndpointsOut,
)
from om_api.server.auth import Admin
from om_api.server.routes import TenantPath, error_answers
from om_api.server.state import State
from om_api.server.webhook_wire import delivery_out, endpoint_out
from om_workers.jobs.webhook_endpoints import register_endpoint

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/admin/tenants/{tenant_id}/webhooks", tags=["admin", "webhooks"])
ERRORS = error_answers(401, 404, 422)
EndpointPath = Annotated[str, Path(pattern=PATH_ID_PATTERN, description="Endpoint id.")]
DeliveryPath = Annotated[
    str, Path(pattern=PATH_ID_PATTERN, description="Delivery id (its webhook-id).")
]


@router.post("", status_code=201, response_model=WebhookEndpointOut, responses=ERRORS)
def add_webhook(
    state: State, _: Admin, tenant_id: TenantPath, body: CreateWebhookRequest
) -> WebhookEndpointOut:
    """Register an endpoint; the answer holds its ``secret`` (generated when not given), the
    only time it is shown. 422 for a URL the service will not call (saying why) or a malformed
    secret; 404 for an unknown tenant."""
    endpoint = register_endpoint(
        state.store,
        tenant_id,
        body.url,
        event_types=tuple(body.event_types),
        secret=body.secret,
        allow_private=state.settings.webhooks.allow_private,
    )
    if endpoint.secret is not None:  # redacted from this process's logs and errors
        state.registry.add(endpoint.secret)
    return endpoint_out(endpoint)


@router.get("", response_model=WebhookEndpointsOut, responses=ERRORS)
def list_webhooks(state: State, _: Admin, tenant_id: TenantPath) -> WebhookEndpointsOut:
    """The tenant's endpoints, oldest first, without secrets. 404 for an unknown tenant."""
    endpoints = state.store.webhooks.endpoints(tenant_id)
    return WebhookEndpointsOut(endpoints=[endpoint_out(e) for e in endpoints])


@router.delete("/{endpoint_id}", status_code=204, responses=ERRORS)
def remove_webhook(
    state: State, _: Admin, tenant_id: TenantPath, endpoint_id: EndpointPath
) -> Response:
    """Delete an endpoint and its deliveries (nothing more is sent to it). 404 when the
    tenant has no such endpoint."""
    state.store.webhooks.remove_endpoint(tenant_id, endpoint_id)
    return Response(status_code=204)


@router.get("/deliveries", response_model=WebhookDeliveriesOut, responses=ERRORS)
def list_deliveries(
    state: State,
    _: Admin,
    tenant_id: TenantPath,
    endpoint: Annotated[str | None, Query(pattern=PATH_ID_PATTERN)] = None,
    failing: bool = False,
    limit: Annotated[int, Query(ge=1, le=MAX_WEBHOOK_DELIVERIES)] = 100,
) -> WebhookDeliveriesOut:
    """The tenant's newest deliveries (of one ``endpoint``), newest first; with ``failing``,
    only those not delivered whose last attempt failed. 404 for an unknown tenant."""
    found = state.store.webhooks.deliveries(
        tenant_id, endpoint_id=endpoint, failing=failing, limit=limit
    )
    return WebhookDeliveriesOut(deliveries=[delivery_out(d) for d in found])


@router.post(
    "/deliveries/{delivery_id}/redeliver",
    status_code=202,
    response_model=WebhookDeliveryOut,
    responses=ERRORS,
)
def redeliver(
    state: State, _: Admin, tenant_id: TenantPath, delivery_id: DeliveryPath
) -> WebhookDeliveryOut:
    """Send a delivery again (delivered or failed), same ``webhook-id``, with a fresh budget
    of attempts: due now, published at once (or, with the broker down, by the reconciler).
    404 when the tenant has no such delivery."""
    delivery = state.store.webhooks.redeliver(tenant_id, delivery_id)
    _publish(delivery.id)
    return delivery_out(delivery)


def _publish(delivery_id: str) -> None:
    try:
        _publisher()(delivery_id, 0.0)
    except Exception:
        log.warning("could not publish om.webhook for %s; the reconciler will", delivery_id)


def _publisher() -> Callable[[str, float], None]:
    # Imported lazily: building the Celery app needs OM_REDIS_URL, the other routes do not.
    from om_workers.celery.app import get_app
    from om_workers.celery.webhooks import webhook_publisher

    return webhook_publisher(get_app())
