"""The Celery application: broker, delivery guarantees, time limits, pool and events.

Only configuration lives here; the tasks (``om.flush``, ``om.reconcile``) register on the app
this module builds. Every choice below closes a way of losing or duplicating work
(``docs/architecture.md``, "Delivery settings"; ``deploy/README.md``, "Choosing the broker").

Both brokers:

- ``task_acks_late`` + ``task_reject_on_worker_lost``: a message is acked only after its task
  ran, and a worker killed mid-task (``kill -9``, OOM) gives it back instead of acking it.
- ``worker_prefetch_multiplier=1``: a worker holds at most one waiting message per slot, so a
  slow flush does not sit on messages other workers could serve.
- ``worker_cancel_long_running_tasks_on_connection_loss``: when the broker connection drops the
  running tasks' messages are redelivered anyway, so cancelling them avoids two live copies.
- No result backend: a job's state is its row in the SQL store, which the API reports.
- Events on (``worker_send_task_events``, ``task_send_sent_event``), so Flower shows tasks. A
  worker process sends no ``task-sent`` event for what it publishes itself
  (:func:`om_workers.celery.startup.quiet_sent_events`): Flower lists those tasks from their
  ``task-received``.

Redis (``redis://``, ``rediss://``; the default, ``OM_REDIS_URL``):

- ``visibility_timeout`` above the hard time limit plus queue wait: Redis redelivers an unacked
  message after it (its clock starts at delivery), so a shorter one would run a long flush twice
  (celery #5935), and a killed worker's message waits that long to come back.

RabbitMQ (``amqp://``, ``amqps://``, ``pyamqp://``; ``OM_BROKER_URL``):

- Queue ``om`` is a durable **quorum queue** (``x-queue-type: quorum``, replicated, survives a
  broker restart) bound to a durable *topic* exchange ``om``. A message unacked by a worker
  whose connection drops (crash, SIGKILL, lost host after the heartbeat) goes back to the queue
  at once; there is no visibility timeout.
- **Publisher confirms** (py-amqp's ``confirm_publish`` transport option): every publish waits
  for the broker's ack, and a nack or a broker-side rejection raises instead of losing the
  message silently.
- Quorum queues have no global QoS: ``worker_detect_quorum_queues`` (on) makes the worker use a
  per-consumer prefetch of ``concurrency x 1``.
- ``self.retry(countdown=...)`` uses Celery's *native delayed delivery* (the worker declares the
  ``celery_delayed_*`` quorum queues at start): the retried message waits in RabbitMQ, not
  unacked in the worker. It needs a topic (not direct) exchange, hence the exchange type.
- The Redis-only transport options (``visibility_timeout``, keepalive, health checks) are not
  passed; the time limits are checked without the visibility timeout. RabbitMQ closes a channel
  whose delivery stays unacked past its ``consumer_timeout`` (30 min by default): keep the hard
  time limit below it.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from celery import Celery  # type: ignore[import-untyped]

from om_workers.celery.broker import TRANSPORT
from om_workers.coordination.timing import TimeLimits, check_time_limits

APP_NAME: Final = "om"
QUEUE: Final = "om"
"""The one queue every ``om.*`` task is routed to."""

Broker = Literal["redis", "amqp"]
REDIS_BROKER_SCHEMES: Final = ("redis", "rediss")
AMQP_BROKER_SCHEMES: Final = ("amqp", "amqps", "pyamqp")
"""The broker URL schemes accepted: Redis, or RabbitMQ over AMQP 0-9-1 (py-amqp)."""

Pool = Literal["threads", "prefork", "gevent", "solo"]
DEFAULT_POOL: Final[Pool] = "threads"
"""Flushes wait on LLM HTTP calls, so threads give high concurrency at low memory; prefork
suits CPU-bound providers and works the same (acks_late and reject_on_worker_lost hold)."""


def broker_kind(broker_url: str) -> Broker:
    """``"redis"`` or ``"amqp"`` (RabbitMQ), from the scheme of ``broker_url``.

    Raises ``ValueError`` for any other scheme (the delivery guarantees are set up for these
    two brokers only); the message names the scheme, never the URL (it may hold a password).
    """
    scheme = urlsplit(broker_url).scheme.lower()
    if scheme in REDIS_BROKER_SCHEMES:
        return "redis"
    if scheme in AMQP_BROKER_SCHEMES:
        return "amqp"
    supported = ", ".join(f"{s}://" for s in (*REDIS_BROKER_SCHEMES, *AMQP_BROKER_SCHEMES))
    raise ValueError(f"unsupported broker scheme {scheme!r}: use one of {supported}")


def check_task_time_limits(limits: TimeLimits) -> None:
    """Raise ``ValueError`` unless HTTP timeout < soft time limit < hard time limit (seconds,
    all positive): the ordering RabbitMQ needs, which has no visibility timeout."""
    order = (
        ("http_timeout_s", limits.http_timeout_s),
        ("soft_time_limit_s", limits.soft_time_limit_s),
        ("hard_time_limit_s", limits.hard_time_limit_s),
    )
    for name, value in order:
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value}")
    for (lo_name, lo), (hi_name, hi) in itertools.pairwise(order):
        if not lo < hi:
            raise ValueError(f"{lo_name} ({lo}) must be below {hi_name} ({hi})")


def celery_config(
    *, broker_url: str, limits: TimeLimits, concurrency: int, pool: Pool = DEFAULT_POOL
) -> dict[str, Any]:
    """The Celery settings for a broker at ``broker_url`` (``OM_BROKER_URL``, else
    ``OM_REDIS_URL`` or the embedded server's URL), ``concurrency`` task slots per worker
    (``OM_WORKER_CONCURRENCY``) and the given time limits (seconds).

    The broker follows the scheme (see :func:`broker_kind` and the module docstring). Raises
    ``ValueError`` for an unsupported scheme, when ``limits`` are out of order (Redis: all four,
    see :func:`om_workers.coordination.timing.check_time_limits`; RabbitMQ: without the
    visibility timeout, see :func:`check_task_time_limits`) or when ``concurrency < 1``.
    """
    kind = broker_kind(broker_url)
    if kind == "redis":
        check_time_limits(limits)
    else:
        check_task_time_limits(limits)
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    conf: dict[str, Any] = {
        "broker_url": broker_url,
        "broker_connection_retry_on_startup": True,
        # Keep retrying a restarting broker forever: giving up would stop the worker for good.
        "broker_connection_max_retries": None,
        "result_backend": None,
        "task_ignore_result": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": QUEUE,
        "task_routes": {"om.*": {"queue": QUEUE}},
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,
        "worker_prefetch_multiplier": 1,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "task_soft_time_limit": limits.soft_time_limit_s,
        "task_time_limit": limits.hard_time_limit_s,
        "worker_pool": pool,
        "worker_concurrency": concurrency,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "enable_utc": True,
    }
    conf.update(_redis_settings(limits) if kind == "redis" else _amqp_settings())
    return conf


def _redis_settings(limits: TimeLimits) -> dict[str, Any]:
    return {
        # kombu's Redis transport, but one whose channel survives being closed after a lost
        # connection (see om_workers.celery.broker).
        "broker_transport": TRANSPORT,
        "broker_transport_options": {
            "visibility_timeout": limits.visibility_timeout_s,
            "socket_keepalive": True,
            "health_check_interval": 15,
        },
    }


def _amqp_settings() -> dict[str, Any]:
    # Celery builds the default queue from these: Queue("om", Exchange("om", "topic"),
    # routing_key="om", queue_arguments={"x-queue-type": "quorum"}), both durable (kombu's
    # default). Topic, not direct: native delayed delivery (countdown retries on quorum queues)
    # binds the queue's exchange to celery_delayed_delivery and skips direct exchanges.
    return {
        # Each publish waits for the broker's confirm; a nack raises (py-amqp MessageNacked).
        "broker_transport_options": {"confirm_publish": True},
        "task_default_queue_type": "quorum",
        "task_default_exchange": QUEUE,
        "task_default_exchange_type": "topic",
        "task_default_routing_key": QUEUE,
        # A worker started with another -Q gets a quorum queue too, never a classic one.
        "task_create_missing_queue_type": "quorum",
        "task_create_missing_queue_exchange_type": "topic",
        # Quorum queues refuse global QoS: per-consumer prefetch instead (concurrency x 1).
        "worker_detect_quorum_queues": True,
        "broker_native_delayed_delivery_queue_type": "quorum",
    }


def create_celery_app(
    *, broker_url: str, limits: TimeLimits, concurrency: int, pool: Pool = DEFAULT_POOL
) -> Any:
    """A ``celery.Celery`` app named ``om`` configured by :func:`celery_config`.

    No connection is made until a task is published or a worker starts. Raises ``ValueError``
    like :func:`celery_config`.
    """
    app = Celery(APP_NAME, set_as_current=False)
    app.conf.update(
        celery_config(broker_url=broker_url, limits=limits, concurrency=concurrency, pool=pool)
    )
    return app
