"""Webhooks in the store: a tenant's endpoints, the outbox of deliveries, and each attempt's
claim and record (see :mod:`om_workers.store.repositories.webhooks`).

Events enter the outbox inside the transactions that end jobs (the flush job's finish in
:mod:`om_workers.store.repositories.jobs`, an erased session's last delete in
:mod:`om_workers.store.erasure`), never here; this service registers endpoints and moves
deliveries along.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from om_core.policy.webhooks import EventType
from om_workers.store.repositories.webhooks import (
    ClaimedAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from om_workers.store.service import Service


class WebhookService(Service):
    """The store's webhook operations (see the module docstring)."""

    def add_endpoint(
        self, tenant_id: str, url: str, secret: str, event_types: tuple[EventType, ...]
    ) -> WebhookEndpoint:
        """Register an endpoint of the tenant (URL and secret already checked); the endpoint
        with its secret. Raises :class:`~om_workers.errors.TenantNotFoundError`."""
        with self._units.write() as uow:
            uow.sessions.require_tenant(tenant_id)
            endpoint = uow.webhooks.add_endpoint(tenant_id, url, secret, event_types, now=uow.now())
            uow.commit()
            return endpoint

    def endpoints(self, tenant_id: str) -> list[WebhookEndpoint]:
        """The tenant's endpoints (no secrets). Raises
        :class:`~om_workers.errors.TenantNotFoundError`."""
        with self._units.read() as uow:
            uow.sessions.require_tenant(tenant_id)
            return uow.webhooks.endpoints(tenant_id)

    def remove_endpoint(self, tenant_id: str, endpoint_id: str) -> None:
        """Delete an endpoint and its deliveries. Raises
        :class:`~om_workers.errors.WebhookEndpointNotFoundError`."""
        with self._units.write() as uow:
            uow.webhooks.remove_endpoint(tenant_id, endpoint_id)
            uow.commit()

    def deliveries(
        self, tenant_id: str, *, endpoint_id: str | None = None, failing: bool = False, limit: int
    ) -> list[WebhookDelivery]:
        """The tenant's newest deliveries, newest first (see
        :meth:`~om_workers.store.repositories.webhooks.WebhookRepository.deliveries`). Raises
        :class:`~om_workers.errors.TenantNotFoundError`."""
        with self._units.read() as uow:
            uow.sessions.require_tenant(tenant_id)
            return uow.webhooks.deliveries(
                tenant_id, endpoint_id=endpoint_id, failing=failing, limit=limit
            )

    def redeliver(self, tenant_id: str, delivery_id: str) -> WebhookDelivery:
        """Make a delivery due now, with a fresh budget of attempts. Raises
        :class:`~om_workers.errors.WebhookDeliveryNotFoundError`."""
        with self._units.write() as uow:
            delivery = uow.webhooks.redeliver(tenant_id, delivery_id, now=uow.now())
            uow.commit()
            return delivery

    def claim(self, delivery_id: str, lease_s: float) -> ClaimedAttempt | None:
        """Claim the delivery's next attempt when it is due, holding it for ``lease_s``
        seconds; ``None`` when there is nothing to send."""
        with self._units.write() as uow:
            now = uow.now()
            claimed = uow.webhooks.claim(
                delivery_id, now=now, lease_until=now + timedelta(seconds=lease_s)
            )
            uow.commit()
            return claimed

    def record(
        self,
        delivery_id: str,
        attempt: int,
        *,
        status: int | None,
        error: str | None,
        retry_in_s: float | None,
        delivered: bool,
    ) -> bool:
        """Record how an attempt ended: ``delivered``, else due again in ``retry_in_s``
        seconds, else (``None``) failed for good. Whether it was recorded."""
        with self._units.write() as uow:
            now = uow.now()
            wait = None if delivered or retry_in_s is None else timedelta(seconds=retry_in_s)
            next_at = None if wait is None else now + wait
            recorded = uow.webhooks.record(
                delivery_id,
                attempt,
                status=status,
                error=error,
                next_attempt_at=next_at,
                delivered_at=now if delivered else None,
            )
            uow.commit()
            return recorded

    def due(self, limit: int, now: datetime | None = None) -> tuple[str, ...]:
        """Ids of deliveries due now (or at ``now``), for the reconciler."""
        with self._units.read() as uow:
            return uow.webhooks.due(now or uow.now(), limit)

    def pending_of(self, source_id: str) -> tuple[str, ...]:
        """Ids of the pending deliveries the job ``source_id`` wrote, to publish them."""
        with self._units.read() as uow:
            return uow.webhooks.pending_of(source_id)
