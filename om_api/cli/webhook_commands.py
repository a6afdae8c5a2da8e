"""``om webhooks add|list|remove|deliveries|redeliver``: a tenant's signed webhooks, on the
database directly like ``om keys`` (--database-url, else OM_DATABASE_URL).

``add`` prints the endpoint's secret once (generated unless ``--secret`` is given); nothing
else ever shows it. ``redeliver`` makes a delivery due now: with OM_REDIS_URL set it is
published at once, else the reconciler sends it on its next pass.
"""

from __future__ import annotations

from typing import Annotated

import typer

from om_api.cli.common import DatabaseUrl, JsonOutput, TenantArg, fail, print_json, sql_store
from om_api.schemas import (
    MAX_WEBHOOK_DELIVERIES,
    WebhookDeliveriesOut,
    WebhookDeliveryOut,
    WebhookEndpointsOut,
)
from om_api.server.webhook_wire import delivery_out, endpoint_out
from om_core.policy.webhooks import EVENT_TYPES, EventType
from om_workers.config import get_settings

EventOption = Annotated[
    list[str] | None,
    typer.Option(
        "--event",
        help="An event type to send (repeat it): flush.succeeded, flush.failed, "
        "session.erased. Default: all.",
    ),
]


def _event_types(events: list[str] | None) -> tuple[EventType, ...]:
    if not events:
        return EVENT_TYPES
    chosen: list[EventType] = []
    for event in events:
        known = next((kind for kind in EVENT_TYPES if kind == event), None)
        if known is None:
            fail(f"--event: {event!r} is none of {', '.join(EVENT_TYPES)}", 2)
        chosen.append(known)
    return tuple(chosen)


def webhooks_add(
    tenant: TenantArg,
    url: Annotated[str, typer.Argument(metavar="URL", help="The receiver's http(s) URL.")],
    events: EventOption = None,
    secret: Annotated[
        str | None,
        typer.Option("--secret", help="whsec_ + base64 (24-64 bytes); default: generated."),
    ] = None,
    as_json: JsonOutput = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Register a webhook endpoint of TENANT and print its secret once."""
    from om_workers.jobs.webhook_endpoints import register_endpoint

    kinds = _event_types(events)
    allow_private = get_settings().webhooks.allow_private
    with sql_store(database_url) as store:
        endpoint = register_endpoint(
            store, tenant, url, event_types=kinds, secret=secret, allow_private=allow_private
        )
    if as_json:
        print_json(endpoint_out(endpoint))
        return
    typer.echo(endpoint.secret)
    typer.echo(f"endpoint {endpoint.id} -> {endpoint.url}; secret shown once", err=True)


def webhooks_list(
    tenant: TenantArg, as_json: JsonOutput = False, database_url: DatabaseUrl = None
) -> None:
    """List TENANT's webhook endpoints (never their secrets)."""
    with sql_store(database_url) as store:
        endpoints = store.webhooks.endpoints(tenant)
    answer = WebhookEndpointsOut(endpoints=[endpoint_out(e) for e in endpoints])
    if as_json:
        print_json(answer)
        return
    for e in answer.endpoints:
        state = "enabled" if e.enabled else "disabled"
        typer.echo(f"{e.id}  {e.url}  {','.join(e.event_types)}  {state}")


def webhooks_remove(
    tenant: TenantArg,
    endpoint: Annotated[str, typer.Argument(metavar="ENDPOINT", help="Endpoint id.")],
    database_url: DatabaseUrl = None,
) -> None:
    """Delete one of TENANT's endpoints and its deliveries."""
    with sql_store(database_url) as store:
        store.webhooks.remove_endpoint(tenant, endpoint)
    typer.echo(f"removed {endpoint}", err=True)


def webhooks_deliveries(
    tenant: TenantArg,
    endpoint: Annotated[
        str | None, typer.Option("--endpoint", help="Only this endpoint's deliveries.")
    ] = None,
    failing: Annotated[
        bool, typer.Option("--failing", help="Only those whose last attempt failed.")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=MAX_WEBHOOK_DELIVERIES)] = 20,
    as_json: JsonOutput = False,
    database_url: DatabaseUrl = None,
) -> None:
    """List TENANT's newest webhook deliveries: state, attempts, last status or error."""
    with sql_store(database_url) as store:
        found = store.webhooks.deliveries(
            tenant, endpoint_id=endpoint, failing=failing, limit=limit
        )
    answer = WebhookDeliveriesOut(deliveries=[delivery_out(d) for d in found])
    if as_json:
        print_json(answer)
        return
    for d in answer.deliveries:
        typer.echo(_line(d))


def _line(d: WebhookDeliveryOut) -> str:
    last = d.last_error or (f"HTTP {d.last_status}" if d.last_status is not None else "-")
    return f"{d.id}  {d.event_type}  {d.state}  attempts={d.attempts}  last={last}"


def webhooks_redeliver(
    tenant: TenantArg,
    delivery: Annotated[str, typer.Argument(metavar="DELIVERY", help="Delivery id.")],
    as_json: JsonOutput = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Send one of TENANT's deliveries again, same webhook-id, with fresh attempts."""
    with sql_store(database_url) as store:
        again = store.webhooks.redeliver(tenant, delivery)
    published = _publish(again.id)
    if as_json:
        print_json(delivery_out(again))
        return
    when = "published now" if published else "the reconciler sends it on its next pass"
    typer.echo(f"{again.id} due again: {when}", err=True)


def _publish(delivery_id: str) -> bool:
    if get_settings().redis.url is None:
        return False
    from om_workers.celery.app import get_app
    from om_workers.celery.webhooks import webhook_publisher

    try:
        webhook_publisher(get_app())(delivery_id, 0.0)
    except Exception:
        return False
    return True
