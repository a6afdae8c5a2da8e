"""The Celery app's configuration, and publishing through it to the private real Redis."""

from __future__ import annotations

import json

import pytest
import redis

from om_workers.celery.config import QUEUE, celery_config, create_celery_app
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.coordination.timing import TimeLimits, derive_time_limits

LIMITS = derive_time_limits(http_timeout_s=30, max_attempts=3, backoff_cap_s=10, queue_wait_s=60)


def test_delivery_guarantees_and_limits() -> None:
    conf = celery_config(broker_url="redis://127.0.0.1:1/0", limits=LIMITS, concurrency=16)
    assert conf["task_acks_late"] is True
    assert conf["task_reject_on_worker_lost"] is True
    assert conf["worker_prefetch_multiplier"] == 1
    assert conf["worker_cancel_long_running_tasks_on_connection_loss"] is True
    assert conf["worker_send_task_events"] is True
    assert conf["task_send_sent_event"] is True
    assert conf["task_default_queue"] == QUEUE == "om"
    assert conf["worker_pool"] == "threads"
    assert conf["worker_concurrency"] == 16
    assert (
        LIMITS.http_timeout_s
        < conf["task_soft_time_limit"]
        < conf["task_time_limit"]
        < conf["broker_transport_options"]["visibility_timeout"]
    )


def test_bad_limits_and_concurrency_are_refused() -> None:
    with pytest.raises(ValueError, match="hard_time_limit_s"):
        celery_config(broker_url="redis://x", limits=TimeLimits(1, 2, 9, 5), concurrency=1)
    with pytest.raises(ValueError, match="concurrency"):
        celery_config(broker_url="redis://x", limits=LIMITS, concurrency=0, pool="prefork")


def test_published_flush_lands_on_the_om_queue(
    redis_server: EmbeddedRedis, client: redis.Redis
) -> None:
    app = create_celery_app(broker_url=redis_server.url, limits=LIMITS, concurrency=2)
    assert app.conf.task_acks_late is True
    app.send_task("om.flush", args=["t1", "s1", "job-1", False])
    assert client.llen(QUEUE) == 1
    raw = client.lindex(QUEUE, 0)
    assert isinstance(raw, str)
    message = json.loads(raw)
    assert message["headers"]["task"] == "om.flush"
    app.close()


def test_the_redis_broker_uses_the_transport_that_survives_a_closed_channel() -> None:
    from om_workers.celery.broker import TRANSPORT

    config = celery_config(broker_url="redis://127.0.0.1:6379/0", limits=LIMITS, concurrency=2)
    assert config["broker_transport"] == TRANSPORT


def test_a_worker_publishes_without_a_sent_event_or_a_declaration_and_the_api_with_both(
    redis_server: EmbeddedRedis, client: redis.Redis
) -> None:
    from om_workers.celery.startup import quiet_sent_events
    from om_workers.celery.tasks import publisher

    app = create_celery_app(broker_url=redis_server.url, limits=LIMITS, concurrency=2)
    events = client.pubsub()
    events.psubscribe("*celeryev/task.sent")
    assert events.get_message(timeout=5) is not None  # subscribed
    publish = publisher(app)
    from_a_worker = publisher(app, declared=True)

    def sent_events() -> list[str]:
        seen = []
        while (event := events.get_message(timeout=0.5)) is not None:
            seen.append(event["channel"])
        return seen

    publish("t1", "s1", "job-1")
    assert len(sent_events()) == 1
    quiet_sent_events(sender=type("WorkController", (), {"app": app})())
    from_a_worker("t1", "s2", "job-2")
    assert sent_events() == []
    assert client.llen(QUEUE) == 2
    raw = client.lindex(QUEUE, 0)
    assert isinstance(raw, str)
    headers = json.loads(raw)["headers"]
    assert headers["argsrepr"] == "['t1', 's2', 'job-2', False]"
    events.close()
    app.close()
