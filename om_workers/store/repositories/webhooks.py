"""Webhook endpoints and the delivery outbox, on one unit of work's connection.

:func:`enqueue_event` is called inside the transaction that ends a job (a flush job's finish,
an erased session's last delete), so an event is recorded exactly when its job's end state
is, and never without it. A delivery is *claimed* before each attempt (:meth:`claim`): one
conditional update that counts the attempt and pushes ``next_attempt_at`` past the attempt's
timeout, so a worker and the reconciler, or two redeliveries of one Celery message, never send
one attempt twice; an attempt whose worker died is due again once that lease ends.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, Row, bindparam, delete, insert, select, update

from om_core.policy.webhooks import EventType, event_payload
from om_workers.errors import WebhookDeliveryNotFoundError, WebhookEndpointNotFoundError
from om_workers.store.driver import FastStatement
from om_workers.store.records import as_utc, as_utc_or_none
from om_workers.store.schema import webhook_deliveries, webhook_endpoints

DeliveryState = Literal["pending", "delivered", "failed"]
MAX_LAST_ERROR_CHARS = 500


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    """A tenant's receiver. ``secret`` is filled only where the caller signs or is shown it
    once (creation); listings leave it ``None``."""

    id: str
    tenant_id: str
    url: str
    event_types: tuple[EventType, ...]
    enabled: bool
    created_at: datetime
    secret: str | None = None


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """One event for one endpoint: its ``id`` is the ``webhook-id`` of every attempt;
    ``payload`` the exact bytes sent (as text), ids and states only."""

    id: str
    tenant_id: str
    endpoint_id: str
    event_type: EventType
    session_id: str | None
    source_id: str
    payload: str
    state: DeliveryState
    attempts: int
    last_status: int | None
    last_error: str | None
    next_attempt_at: datetime | None
    created_at: datetime
    delivered_at: datetime | None


@dataclass(frozen=True, slots=True)
class ClaimedAttempt:
    """What one attempt sends: the delivery as claimed (``attempts`` counts this one), and
    its endpoint's URL and secret."""

    delivery: WebhookDelivery
    url: str
    secret: str


def _endpoint(row: Row[Any], *, with_secret: bool = False) -> WebhookEndpoint:
    data = row._mapping
    return WebhookEndpoint(
        id=data["id"],
        tenant_id=data["tenant_id"],
        url=data["url"],
        event_types=tuple(data["event_types"]),
        enabled=bool(data["enabled"]),
        created_at=as_utc(data["created_at"]),
        secret=data["secret"] if with_secret else None,
    )


def _delivery(row: Row[Any]) -> WebhookDelivery:
    data = row._mapping
    return WebhookDelivery(
        id=data["id"],
        tenant_id=data["tenant_id"],
        endpoint_id=data["endpoint_id"],
        event_type=data["event_type"],
        session_id=data["session_id"],
        source_id=data["source_id"],
        payload=data["payload"],
        state=data["state"],
        attempts=int(data["attempts"]),
        last_status=data["last_status"],
        last_error=data["last_error"],
        next_attempt_at=as_utc_or_none(data["next_attempt_at"]),
        created_at=as_utc(data["created_at"]),
        delivered_at=as_utc_or_none(data["delivered_at"]),
    )


_ENDPOINTS_OF = (
    select(webhook_endpoints)
    .where(webhook_endpoints.c.tenant_id == bindparam("tenant"))
    .order_by(webhook_endpoints.c.created_at, webhook_endpoints.c.id)
)
_LISTENING = FastStatement(
    select(webhook_endpoints.c.id, webhook_endpoints.c.event_types).where(
        webhook_endpoints.c.tenant_id == bindparam("tenant"),
        webhook_endpoints.c.enabled.is_(True),
    )
)
_INSERT_DELIVERY = insert(webhook_deliveries)
_THIS_DELIVERY = (
    webhook_deliveries.c.id == bindparam("delivery"),
    webhook_deliveries.c.tenant_id == bindparam("tenant"),
)
_CLAIM = (
    update(webhook_deliveries)
    .where(
        webhook_deliveries.c.id == bindparam("delivery"),
        webhook_deliveries.c.state == "pending",
        webhook_deliveries.c.next_attempt_at <= bindparam("now"),
    )
    .values(attempts=webhook_deliveries.c.attempts + 1, next_attempt_at=bindparam("lease"))
    .returning(*webhook_deliveries.c)
)
_RECORD = (
    update(webhook_deliveries)
    .where(
        webhook_deliveries.c.id == bindparam("delivery"),
        webhook_deliveries.c.state == "pending",
        webhook_deliveries.c.attempts == bindparam("attempt"),
    )
    .values(
        state=bindparam("new_state"),
        last_status=bindparam("status"),
        last_error=bindparam("error"),
        next_attempt_at=bindparam("next_at"),
        delivered_at=bindparam("delivered"),
    )
)
_DUE = (
    select(webhook_deliveries.c.id)
    .where(
        webhook_deliveries.c.state == "pending",
        webhook_deliveries.c.next_attempt_at <= bindparam("now"),
    )
    .order_by(webhook_deliveries.c.next_attempt_at)
    .limit(bindparam("limit"))
)
_OF_SOURCE = select(webhook_deliveries.c.id).where(
    webhook_deliveries.c.source_id == bindparam("source"),
    webhook_deliveries.c.state == "pending",
)


def enqueue_event(
    connection: Connection,
    tenant_id: str,
    event_type: EventType,
    *,
    session_id: str | None,
    source_id: str,
    data: Mapping[str, Any],
    now: datetime,
) -> tuple[str, ...]:
    """Write one pending delivery of the event for each enabled endpoint of the tenant that
    listens to ``event_type``, due at once; their ids, to publish once the transaction
    committed. ``data`` holds ids, states and counts only (it is sent as it is)."""
    listening = [
        row.id
        for row in _LISTENING.rows(connection, {"tenant": tenant_id})
        if event_type in row.event_types
    ]
    if not listening:
        return ()
    timestamp = now.isoformat().replace("+00:00", "Z")
    payload = event_payload(event_type, timestamp, data).decode()
    rows = [
        {
            "id": f"msg_{uuid.uuid4().hex}",
            "tenant_id": tenant_id,
            "endpoint_id": endpoint_id,
            "event_type": event_type,
            "session_id": session_id,
            "source_id": source_id,
            "payload": payload,
            "state": "pending",
            "attempts": 0,
            "last_status": None,
            "last_error": None,
            "next_attempt_at": now,
            "created_at": now,
            "delivered_at": None,
        }
        for endpoint_id in listening
    ]
    connection.execute(_INSERT_DELIVERY, rows)
    return tuple(row["id"] for row in rows)


def delete_session_deliveries(connection: Connection, tenant_id: str, session_id: str) -> None:
    """Delete every delivery about the session (its erasure: no record of it stays behind)."""
    connection.execute(
        delete(webhook_deliveries).where(
            webhook_deliveries.c.tenant_id == tenant_id,
            webhook_deliveries.c.session_id == session_id,
        )
    )


class WebhookRepository:
    """Endpoints and deliveries, scoped by tenant (another tenant's is reported missing),
    except what the delivering worker and the reconciler do by delivery id."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def add_endpoint(
        self,
        tenant_id: str,
        url: str,
        secret: str,
        event_types: tuple[EventType, ...],
        *,
        now: datetime,
    ) -> WebhookEndpoint:
        """Insert an enabled endpoint; it, with its secret (shown once)."""
        endpoint_id = f"ep_{uuid.uuid4().hex[:24]}"
        values = {
            "id": endpoint_id,
            "tenant_id": tenant_id,
            "url": url,
            "secret": secret,
            "event_types": list(event_types),
            "enabled": True,
            "created_at": now,
        }
        self._connection.execute(insert(webhook_endpoints), values)
        return WebhookEndpoint(endpoint_id, tenant_id, url, event_types, True, now, secret)

    def endpoints(self, tenant_id: str) -> list[WebhookEndpoint]:
        """The tenant's endpoints, oldest first, without their secrets."""
        rows = self._connection.execute(_ENDPOINTS_OF, {"tenant": tenant_id})
        return [_endpoint(row) for row in rows]

    def remove_endpoint(self, tenant_id: str, endpoint_id: str) -> None:
        """Delete the endpoint and (cascading) its deliveries. Raises
        :class:`WebhookEndpointNotFoundError`."""
        removed = self._connection.execute(
            delete(webhook_endpoints).where(
                webhook_endpoints.c.id == endpoint_id, webhook_endpoints.c.tenant_id == tenant_id
            )
        )
        if not removed.rowcount:
            raise WebhookEndpointNotFoundError(f"no webhook endpoint {endpoint_id!r}")

    def deliveries(
        self, tenant_id: str, *, endpoint_id: str | None, failing: bool, limit: int
    ) -> list[WebhookDelivery]:
        """The tenant's newest ``limit`` deliveries (of one endpoint), newest first; with
        ``failing``, only those not delivered whose last attempt failed."""
        query = select(webhook_deliveries).where(webhook_deliveries.c.tenant_id == tenant_id)
        if endpoint_id is not None:
            query = query.where(webhook_deliveries.c.endpoint_id == endpoint_id)
        if failing:
            query = query.where(
                webhook_deliveries.c.delivered_at.is_(None), webhook_deliveries.c.attempts > 0
            )
        order = (webhook_deliveries.c.created_at.desc(), webhook_deliveries.c.id.desc())
        rows = self._connection.execute(query.order_by(*order).limit(limit))
        return [_delivery(row) for row in rows]

    def redeliver(self, tenant_id: str, delivery_id: str, *, now: datetime) -> WebhookDelivery:
        """Make the delivery pending and due now with a fresh budget of attempts (a
        delivered one is sent again, under the same id). Raises
        :class:`WebhookDeliveryNotFoundError`."""
        statement = (
            update(webhook_deliveries)
            .where(*_THIS_DELIVERY)
            .values(state="pending", attempts=0, next_attempt_at=now, delivered_at=None)
            .returning(*webhook_deliveries.c)
        )
        row = self._connection.execute(statement, {"delivery": delivery_id, "tenant": tenant_id})
        found = row.first()
        if found is None:
            raise WebhookDeliveryNotFoundError(f"no webhook delivery {delivery_id!r}")
        return _delivery(found)

    def claim(
        self, delivery_id: str, *, now: datetime, lease_until: datetime
    ) -> ClaimedAttempt | None:
        """Claim the next attempt of a pending delivery that is due (see the module
        docstring); ``None`` when it is not due, not pending or gone."""
        params = {"delivery": delivery_id, "now": now, "lease": lease_until}
        row = self._connection.execute(_CLAIM, params).first()
        if row is None:
            return None
        delivery = _delivery(row)
        endpoint = self._connection.execute(
            select(webhook_endpoints.c.url, webhook_endpoints.c.secret).where(
                webhook_endpoints.c.id == delivery.endpoint_id
            )
        ).first()
        if endpoint is None:
            return None
        return ClaimedAttempt(delivery, endpoint.url, endpoint.secret)

    def record(
        self,
        delivery_id: str,
        attempt: int,
        *,
        status: int | None,
        error: str | None,
        next_attempt_at: datetime | None,
        delivered_at: datetime | None,
    ) -> bool:
        """Record how attempt number ``attempt`` ended: delivered (``delivered_at``), due
        again at ``next_attempt_at``, or failed for good (neither). Whether it was recorded
        (not when a redelivery or a later attempt took the row over meanwhile)."""
        state: DeliveryState = (
            "delivered"
            if delivered_at is not None
            else "pending"
            if next_attempt_at is not None
            else "failed"
        )
        params = {
            "delivery": delivery_id,
            "attempt": attempt,
            "new_state": state,
            "status": status,
            "error": None if error is None else error[:MAX_LAST_ERROR_CHARS],
            "next_at": next_attempt_at,
            "delivered": delivered_at,
        }
        return bool(self._connection.execute(_RECORD, params).rowcount)

    def due(self, now: datetime, limit: int) -> tuple[str, ...]:
        """Ids of pending deliveries (of any tenant) due at ``now``, longest due first."""
        return tuple(self._connection.execute(_DUE, {"now": now, "limit": limit}).scalars())

    def pending_of(self, source_id: str) -> tuple[str, ...]:
        """Ids of the pending deliveries a job (``source_id``) wrote."""
        return tuple(self._connection.execute(_OF_SOURCE, {"source": source_id}).scalars())
