"""Webhook endpoints and the delivery outbox in the store: events written in the transaction
that ends a flush job or an erased session, claimed once per attempt, recorded, redelivered,
scoped by tenant, and erased with their session or tenant. SQLite and, with
``OM_TEST_DATABASE_URL``, PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event, func, select
from store_factories import message

from om_core.policy.webhooks import secret_from_bytes
from om_workers.errors import WebhookDeliveryNotFoundError, WebhookEndpointNotFoundError
from om_workers.store import AccountStore, SqlStore
from om_workers.store.schema import webhook_deliveries, webhook_endpoints

SECRET = secret_from_bytes(bytes(range(32)))
URL = "https://hooks.example.com/om"
CANARY = "canary-webhook-7d1e-text"


def _later(seconds: float = 3600) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def _rows(store: SqlStore, table: object) -> int:
    with store.engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(table)).scalar_one())  # type: ignore[arg-type]


def test_finishing_a_flush_job_writes_its_event_for_each_listening_endpoint(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    every = store.webhooks.add_endpoint(tenant, URL, SECRET, ("flush.succeeded", "flush.failed"))
    store.webhooks.add_endpoint(tenant, URL + "/erased", SECRET, ("session.erased",))
    store.append_entries(tenant, session_id, [message("m1", session_id, CANARY)])
    job = store.create_job(tenant, session_id)
    store.start_job(tenant, job.id)
    assert store.webhooks.pending_of(job.id) == ()  # nothing before the end
    finished = store.finish_job(tenant, job.id, "succeeded", counts={"observations": 2})
    (delivery_id,) = store.webhooks.pending_of(job.id)
    assert finished.deliveries == (delivery_id,)  # the finish says what it wrote
    (delivery,) = store.webhooks.deliveries(tenant, limit=10)
    assert (delivery.id, delivery.endpoint_id, delivery.event_type) == (
        delivery_id,
        every.id,
        "flush.succeeded",
    )
    body = json.loads(delivery.payload)
    assert body["type"] == "flush.succeeded"
    assert body["data"] == {
        "job_id": job.id,
        "session_id": session_id,
        "state": "succeeded",
        "counts": {"observations": 2},
    }
    assert CANARY not in delivery.payload


def test_a_failed_job_says_flush_failed_without_its_error_and_skipped_says_nothing(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.webhooks.add_endpoint(tenant, URL, SECRET, ("flush.succeeded", "flush.failed"))
    failed = store.create_job(tenant, session_id)
    store.start_job(tenant, failed.id)
    store.finish_job(tenant, failed.id, "failed", error=f"the provider quoted {CANARY}")
    skipped = store.create_job(tenant, session_id)
    store.finish_job(tenant, skipped.id, "skipped")
    (delivery,) = store.webhooks.deliveries(tenant, limit=10)
    assert delivery.event_type == "flush.failed" and delivery.source_id == failed.id
    assert CANARY not in delivery.payload
    assert store.webhooks.pending_of(skipped.id) == ()


def test_a_job_swept_as_lost_says_flush_failed(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.webhooks.add_endpoint(tenant, URL, SECRET, ("flush.failed",))
    job = store.create_job(tenant, session_id)
    store.start_job(tenant, job.id)
    assert store.fail_running_jobs([job.id], "worker lost") == (job.id,)
    (delivery,) = store.webhooks.deliveries(tenant, limit=10)
    assert (delivery.event_type, delivery.source_id) == ("flush.failed", job.id)


def test_a_tenant_without_endpoints_writes_no_deliveries(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    job = store.create_job(tenant, session_id)
    store.finish_job(tenant, job.id, "succeeded")
    assert _rows(store, webhook_deliveries) == 0


def test_a_finish_reads_the_endpoints_only_of_a_tenant_that_has_one(
    store: SqlStore, accounts: AccountStore, tenant: str, session_id: str
) -> None:
    # The finish itself says whether the tenant has an enabled endpoint; another tenant's
    # endpoint neither writes a delivery here nor costs this finish the endpoint query.
    rival = accounts.create_tenant("rival").id
    store.webhooks.add_endpoint(rival, URL, SECRET, ("flush.succeeded",))
    statements: list[str] = []

    def seen(*args: object) -> None:
        statements.append(str(args[2]))

    job = store.create_job(tenant, session_id)
    event.listen(store.engine, "before_cursor_execute", seen)
    try:
        assert store.finish_job(tenant, job.id, "succeeded").deliveries == ()
    finally:
        event.remove(store.engine, "before_cursor_execute", seen)
    assert _rows(store, webhook_deliveries) == 0
    assert not [s for s in statements if s.startswith("SELECT webhook_endpoints.id")]


def test_an_attempt_is_claimed_once_then_recorded(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.webhooks.add_endpoint(tenant, URL, SECRET, ("flush.succeeded",))
    job = store.create_job(tenant, session_id)
    store.finish_job(tenant, job.id, "succeeded")
    (delivery_id,) = store.webhooks.due(10)
    claimed = store.webhooks.claim(delivery_id, lease_s=60)
    assert claimed is not None
    assert (claimed.url, claimed.secret, claimed.delivery.attempts) == (URL, SECRET, 1)
    # Held by the first claim: neither a duplicate message nor the reconciler sends it.
    assert store.webhooks.claim(delivery_id, lease_s=60) is None
    assert store.webhooks.due(10) == ()
    assert store.webhooks.due(10, now=_later(61)) == (delivery_id,)
    assert store.webhooks.record(
        delivery_id, 1, status=503, error="HTTP 503", retry_in_s=0.0, delivered=False
    )
    (failing,) = store.webhooks.deliveries(tenant, failing=True, limit=10)
    assert (failing.state, failing.attempts, failing.last_status) == ("pending", 1, 503)
    again = store.webhooks.claim(delivery_id, lease_s=60)
    assert again is not None and again.delivery.attempts == 2
    # A stale attempt's record does not overwrite the newer one.
    assert not store.webhooks.record(
        delivery_id, 1, status=200, error=None, retry_in_s=None, delivered=True
    )
    assert store.webhooks.record(
        delivery_id, 2, status=204, error=None, retry_in_s=None, delivered=True
    )
    (done,) = store.webhooks.deliveries(tenant, limit=10)
    assert (done.state, done.last_status, done.next_attempt_at) == ("delivered", 204, None)
    assert done.delivered_at is not None
    assert store.webhooks.deliveries(tenant, failing=True, limit=10) == []


def test_a_delivery_out_of_attempts_fails_until_redelivered(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.webhooks.add_endpoint(tenant, URL, SECRET, ("flush.succeeded",))
    job = store.create_job(tenant, session_id)
    store.finish_job(tenant, job.id, "succeeded")
    (delivery_id,) = store.webhooks.pending_of(job.id)
    assert store.webhooks.claim(delivery_id, lease_s=60) is not None
    store.webhooks.record(
        delivery_id, 1, status=None, error="ConnectError", retry_in_s=None, delivered=False
    )
    (failed,) = store.webhooks.deliveries(tenant, failing=True, limit=10)
    assert (failed.state, failed.last_error, failed.next_attempt_at) == (
        "failed",
        "ConnectError",
        None,
    )
    assert store.webhooks.claim(delivery_id, lease_s=60) is None
    again = store.webhooks.redeliver(tenant, delivery_id)
    assert (again.id, again.state, again.attempts) == (delivery_id, "pending", 0)
    assert store.webhooks.due(10) == (delivery_id,)


def test_endpoints_and_deliveries_are_the_tenant_s_own(
    store: SqlStore, accounts: AccountStore, tenant: str, session_id: str
) -> None:
    rival = accounts.create_tenant("rival").id
    endpoint = store.webhooks.add_endpoint(tenant, URL, SECRET, ("flush.succeeded",))
    job = store.create_job(tenant, session_id)
    store.finish_job(tenant, job.id, "succeeded")
    (delivery_id,) = store.webhooks.pending_of(job.id)
    assert store.webhooks.endpoints(rival) == []
    assert store.webhooks.deliveries(rival, limit=10) == []
    with pytest.raises(WebhookDeliveryNotFoundError):
        store.webhooks.redeliver(rival, delivery_id)
    with pytest.raises(WebhookEndpointNotFoundError):
        store.webhooks.remove_endpoint(rival, endpoint.id)
    (listed,) = store.webhooks.endpoints(tenant)
    assert listed.secret is None and listed.id == endpoint.id
    store.webhooks.remove_endpoint(tenant, endpoint.id)
    assert _rows(store, webhook_deliveries) == 0


def test_erasing_a_session_deletes_its_deliveries_and_says_session_erased(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.webhooks.add_endpoint(tenant, URL, SECRET, ("flush.succeeded", "session.erased"))
    store.create_session(tenant, "kept")
    for sid in (session_id, "kept"):
        job = store.create_job(tenant, sid)
        store.finish_job(tenant, job.id, "succeeded")
    erasure = store.erasure.erase_session(tenant, session_id, None)
    started = store.erasure.start_job(erasure.id)
    assert started is not None
    for target in started[1]:
        store.erasure.erase_target(target)
    kinds = sorted(
        (d.event_type, d.session_id) for d in store.webhooks.deliveries(tenant, limit=10)
    )
    assert kinds == [("flush.succeeded", "kept"), ("session.erased", session_id)]
    (erased,) = store.webhooks.pending_of(erasure.id)
    (row,) = [d for d in store.webhooks.deliveries(tenant, limit=10) if d.id == erased]
    assert json.loads(row.payload)["data"] == {
        "session_id": session_id,
        "erasure_job_id": erasure.id,
    }


def test_erasing_a_tenant_deletes_its_endpoints_and_deliveries(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.webhooks.add_endpoint(tenant, URL, SECRET, ("flush.succeeded", "session.erased"))
    job = store.create_job(tenant, session_id)
    store.finish_job(tenant, job.id, "succeeded")
    erasure = store.erasure.erase_tenant(tenant)
    started = store.erasure.start_job(erasure.id)
    assert started is not None
    for target in started[1]:
        store.erasure.erase_target(target)
    store.erasure.finish_job(erasure.id, "succeeded", {"sessions": 1})
    assert _rows(store, webhook_endpoints) == 0
    assert _rows(store, webhook_deliveries) == 0
