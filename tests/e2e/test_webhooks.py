"""Signed webhooks end to end: a real ``celery worker`` sends the events its jobs end with to
a real HTTP receiver on localhost, which verifies each with the ``standardwebhooks`` package;
a tampered request fails verification; a receiver that is down gets every event once it is
back, once each by id; the reconciler sends a delivery whose message was lost; a private
address is refused again before each attempt."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
import redis
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from om_core.policy.webhooks import retry_delay_s, secret_from_bytes
from om_workers.celery.app import enqueue_flush
from om_workers.celery.tasks import erase_publisher
from om_workers.celery.webhooks import webhook_publisher
from om_workers.config import WebhookSettings
from om_workers.jobs.reconcile import reconcile_once
from om_workers.jobs.webhook_endpoints import register_endpoint
from om_workers.jobs.webhooks import WebhookPolicy, attempt_delivery
from om_workers.store import SqlStore
from tests.e2e.support import add_chat, wait_for
from tests.e2e.webhook_receiver import Receiver, serve_receiver
from tests.e2e.workers import StartWorker

SECRET = secret_from_bytes(b"webhook-test-secret-0123456789ab")
OUTAGE_S = 60.0
WORKER_ENV = {
    "OM_WEBHOOK_ALLOW_PRIVATE": "true",  # the receiver is on 127.0.0.1
    # The production schedule scaled down: the same number of attempts, in a fraction of the
    # time (see attempts_during_an_outage).
    "OM_WEBHOOK_BACKOFF_BASE_S": "0.05",
    "OM_WEBHOOK_BACKOFF_CAP_S": "0.5",
    "OM_WEBHOOK_MAX_ATTEMPTS": "100",
    "OM_WEBHOOK_TIMEOUT_S": "2",
}


@pytest.fixture
def receiver() -> Any:
    with serve_receiver(SECRET) as running:
        yield running


def _register(store: SqlStore, tenant: str, receiver: Receiver) -> None:
    register_endpoint(store, tenant, receiver.url, secret=SECRET, allow_private=True)


def _flush(store: SqlStore, client: redis.Redis, app: Any, tenant: str, session: str) -> str:
    store.create_session(tenant, session)
    add_chat(store, tenant, session, 2)
    return enqueue_flush(store, client, tenant, session, app=app, fair=False).job_id


def _all_delivered(store: SqlStore, tenant: str) -> bool:
    return all(d.state == "delivered" for d in store.webhooks.deliveries(tenant, limit=100))


def attempts_during_an_outage(outage_s: float) -> int:
    """Attempts the default schedule makes at a receiver that is down for ``outage_s``
    seconds, at worst (every wait shortened by its full jitter): the next one is after it."""
    defaults = WebhookSettings()
    elapsed, attempt = 0.0, 1
    while True:
        wait = retry_delay_s(
            attempt,
            max_attempts=defaults.max_attempts,
            base_s=defaults.backoff_base_s,
            cap_s=defaults.backoff_cap_s,
            draw=0.999,
        )
        assert wait is not None, "the default schedule gives up within the outage"
        elapsed += wait
        if elapsed >= outage_s:
            return attempt
        attempt += 1


def test_events_arrive_signed_and_a_tampered_one_fails_verification(
    store: SqlStore,
    client: redis.Redis,
    tenant: str,
    app: Any,
    start_worker: StartWorker,
    receiver: Receiver,
) -> None:
    _register(store, tenant, receiver)
    start_worker(**WORKER_ENV)
    job_id = _flush(store, client, app, tenant, "s1")
    wait_for(lambda: receiver.of_type("flush.succeeded"), 60, "flush.succeeded")
    (event,) = receiver.of_type("flush.succeeded")
    assert event["data"]["job_id"] == job_id and event["data"]["session_id"] == "s1"
    assert event["data"]["state"] == "succeeded" and receiver.forged == 0
    # The receiver answered before the worker recorded it: wait for the record.
    wait_for(lambda: _all_delivered(store, tenant), 60, "the delivery recorded")
    (delivery,) = store.webhooks.deliveries(tenant, limit=10)
    assert (delivery.state, delivery.attempts, delivery.last_status) == ("delivered", 1, 204)

    # The request as it arrived verifies; any change to it does not.
    received = receiver.raw[0]
    hook = Webhook(SECRET)
    assert hook.verify(received.body, received.headers) == event
    with pytest.raises(WebhookVerificationError):
        hook.verify(received.body.replace(b"succeeded", b"failed"), received.headers)
    digest = bytearray(base64.b64decode(received.headers["webhook-signature"][3:]))
    digest[-1] ^= 0x01
    forged = "v1," + base64.b64encode(bytes(digest)).decode()
    with pytest.raises(WebhookVerificationError):
        hook.verify(received.body, {**received.headers, "webhook-signature": forged})
    with pytest.raises(WebhookVerificationError):
        Webhook(secret_from_bytes(bytes(32))).verify(received.body, received.headers)

    # Erasing the session sends session.erased, and its earlier deliveries are gone.
    erasure = store.erasure.erase_session(tenant, "s1", None)
    erase_publisher(app)(erasure.id)
    wait_for(lambda: receiver.of_type("session.erased"), 60, "session.erased")
    (erased,) = receiver.of_type("session.erased")
    assert erased["data"] == {"session_id": "s1", "erasure_job_id": erasure.id}
    remaining = store.webhooks.deliveries(tenant, limit=10)
    assert [d.event_type for d in remaining] == ["session.erased"]


def test_a_lost_delivery_is_sent_by_the_reconciler(
    store: SqlStore,
    client: redis.Redis,
    tenant: str,
    app: Any,
    start_worker: StartWorker,
    receiver: Receiver,
) -> None:
    _register(store, tenant, receiver)
    start_worker(**WORKER_ENV)
    store.create_session(tenant, "s2")
    job = store.create_job(tenant, "s2")
    store.finish_job(tenant, job.id, "succeeded")  # ended here: nothing published it
    (lost,) = store.webhooks.pending_of(job.id)
    publish = webhook_publisher(app)
    report = reconcile_once(
        store,
        client,
        lambda *_: None,
        stale_pending_s=3600,
        stuck_job_s=3600,
        publish_webhook=lambda delivery: publish(delivery, 0.0),
    )
    assert report.webhooks == (lost,)
    wait_for(lambda: lost in receiver.accepted, 60, "the reconciled delivery")
    assert receiver.answered_ok[lost] == 1


def test_a_receiver_down_for_60_s_gets_every_event_afterwards_once_each(
    store: SqlStore,
    client: redis.Redis,
    tenant: str,
    app: Any,
    start_worker: StartWorker,
    receiver: Receiver,
) -> None:
    refusals = attempts_during_an_outage(OUTAGE_S)
    # Under the defaults a 60 s outage costs a handful of attempts, far from giving up.
    assert 3 <= refusals < WebhookSettings().max_attempts
    _register(store, tenant, receiver)
    receiver.down = True
    start_worker(**WORKER_ENV)
    during = [_flush(store, client, app, tenant, f"down-{n}") for n in range(3)]

    def outage_spanned() -> bool:
        with receiver.lock:
            counts = dict(receiver.refused)
        return len(counts) == len(during) and min(counts.values()) >= refusals

    wait_for(outage_spanned, 120, f"{refusals} refused attempts of each event")
    with receiver.lock:
        receiver.down = False
    after = [_flush(store, client, app, tenant, f"up-{n}") for n in range(2)]
    expected = {d.id for d in store.webhooks.deliveries(tenant, limit=100)}
    wait_for(
        lambda: len(receiver.accepted) == len(during) + len(after),
        120,
        "every event after the outage",
        lambda: (len(receiver.accepted), store.webhooks.deliveries(tenant, limit=100)),
    )
    wait_for(lambda: _all_delivered(store, tenant), 60, "every delivery recorded")
    deliveries = store.webhooks.deliveries(tenant, limit=100)
    assert {d.id for d in deliveries} == set(receiver.accepted) and expected <= set(
        receiver.accepted
    )
    assert all(n == 1 for n in receiver.answered_ok.values()), receiver.answered_ok
    jobs = {payload["data"]["job_id"] for payload in receiver.accepted.values()}
    assert jobs == set(during) | set(after)
    assert all(d.state == "delivered" for d in deliveries)
    for d in deliveries:
        assert d.attempts == receiver.refused[d.id] + 1
    assert receiver.forged == 0


def test_a_private_address_is_refused_again_at_delivery_time(
    store: SqlStore, tenant: str, receiver: Receiver
) -> None:
    # Registered while private addresses were allowed; the operator has since refused them.
    _register(store, tenant, receiver)
    store.create_session(tenant, "s3")
    job = store.create_job(tenant, "s3")
    store.finish_job(tenant, job.id, "succeeded")
    (delivery_id,) = store.webhooks.pending_of(job.id)
    policy = WebhookPolicy(allow_private=False, backoff_base_s=30, max_attempts=3)
    with httpx.Client() as http:
        result = attempt_delivery(store, http, delivery_id, policy)
    assert (result.outcome, result.status) == ("retry", None)
    assert result.retry_in_s is not None and result.retry_in_s > 0
    assert receiver.raw == []
    (delivery,) = store.webhooks.deliveries(tenant, limit=10)
    assert delivery.last_error is not None and "loopback address" in delivery.last_error
    assert SECRET not in delivery.last_error and delivery.state == "pending"
