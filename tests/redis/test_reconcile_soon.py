"""An early reconciler pass: asked for once however many processes ask at the same moment, and
asked for by a worker whose consumer gets its broker connection back."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import redis

from om_workers.celery.config import QUEUE, create_celery_app
from om_workers.celery.healing import reconcile_on_reconnect
from om_workers.celery.tasks import RECONCILE_TASK
from om_workers.coordination import keys
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.coordination.timing import derive_time_limits
from om_workers.jobs.reconcile import request_reconcile_soon
from tests.redis.helpers import wait_until

LIMITS = derive_time_limits(http_timeout_s=5, max_attempts=2, backoff_cap_s=1, queue_wait_s=10)


def test_processes_asking_at_once_get_one_pass(client: redis.Redis) -> None:
    sent: list[str] = []
    assert request_reconcile_soon(client, lambda: sent.append("pass"), window_s=60)
    assert not request_reconcile_soon(client, lambda: sent.append("pass"), window_s=60)
    assert sent == ["pass"]
    assert 0 < client.pttl(keys.RECONCILE_SOON) <= 60_000
    client.delete(keys.RECONCILE_SOON)  # the window passed
    assert request_reconcile_soon(client, lambda: sent.append("pass"), window_s=60)
    assert sent == ["pass", "pass"]


def test_a_request_that_could_not_be_sent_lets_another_process_ask(client: redis.Redis) -> None:
    def refused() -> None:
        raise ConnectionError("broker out")

    with pytest.raises(ConnectionError):
        request_reconcile_soon(client, refused)
    assert client.get(keys.RECONCILE_SOON) is None
    sent: list[str] = []
    assert request_reconcile_soon(client, lambda: sent.append("pass"))
    assert sent == ["pass"]


def test_a_consumer_that_reconnects_asks_for_a_pass(
    redis_server: EmbeddedRedis, client: redis.Redis
) -> None:
    app = create_celery_app(broker_url=redis_server.url, limits=LIMITS, concurrency=1)
    step_class = reconcile_on_reconnect(lambda: client)
    app.steps["consumer"].add(step_class)
    consumer = SimpleNamespace(app=app)
    step = step_class(consumer)
    try:
        step.start(consumer)  # the worker's first connection: beat's schedule covers it
        step.start(consumer)  # the connection came back
        assert wait_until(lambda: client.llen(QUEUE) == 1, timeout_s=60)
        raw = client.lindex(QUEUE, 0)
        assert isinstance(raw, str)
        assert json.loads(raw)["headers"]["task"] == RECONCILE_TASK
        assert client.exists(keys.RECONCILE_SOON)
    finally:
        app.close()
