"""The Celery application: broker, delivery guarantees, time limits, pool and events.

Only configuration lives here; the tasks (``om.flush``, ``om.reconcile``) register on the app
this module builds. Every choice below closes a way of losing or duplicating work with a Redis
broker (``docs/architecture.md``, "Delivery settings"):

- ``task_acks_late`` + ``task_reject_on_worker_lost``: a message is acked only after its task
  ran, and a worker killed mid-task (``kill -9``, OOM) gives it back instead of acking it.
- ``worker_prefetch_multiplier=1``: a worker holds at most one waiting message per slot, so a
  slow flush does not sit on messages other workers could serve (and their visibility clock,
  which starts at delivery, does not run out while they wait).
- ``visibility_timeout`` above the hard time limit plus queue wait: Redis redelivers an unacked
  message after it, so a shorter one would run a long flush twice (celery #5935).
- ``worker_cancel_long_running_tasks_on_connection_loss``: when the broker connection drops the
  running tasks' messages are redelivered anyway, so cancelling them avoids two live copies.
- No result backend: a job's state is its row in the SQL store, which the API reports.
- Events on (``worker_send_task_events``, ``task_send_sent_event``), so Flower shows tasks.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from celery import Celery  # type: ignore[import-untyped]

from om_workers.coordination.timing import TimeLimits, check_time_limits
from om_workers.jobs.broker import TRANSPORT

APP_NAME: Final = "om"
QUEUE: Final = "om"
"""The one queue every ``om.*`` task is routed to."""

Pool = Literal["threads", "prefork", "gevent", "solo"]
DEFAULT_POOL: Final[Pool] = "threads"
"""Flushes wait on LLM HTTP calls, so threads give high concurrency at low memory; prefork
suits CPU-bound providers and works the same (acks_late and reject_on_worker_lost hold)."""


def celery_config(
    *, broker_url: str, limits: TimeLimits, concurrency: int, pool: Pool = DEFAULT_POOL
) -> dict[str, Any]:
    """The Celery settings for a broker at ``broker_url`` (``OM_REDIS_URL`` or the embedded
    server's URL), ``concurrency`` task slots per worker (``OM_WORKER_CONCURRENCY``) and
    the given time limits.

    Raises ``ValueError`` when ``limits`` are out of order (see
    :func:`om_workers.coordination.timing.check_time_limits`) or ``concurrency < 1``.
    """
    check_time_limits(limits)
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    return {
        "broker_url": broker_url,
        # kombu's Redis transport, but one whose channel survives being closed after a lost
        # connection (see om_workers.jobs.broker); other brokers keep their own.
        "broker_transport": TRANSPORT if broker_url.startswith(("redis://", "rediss://")) else None,
        "broker_connection_retry_on_startup": True,
        # Keep retrying a restarting Redis forever: giving up would stop the worker for good.
        "broker_connection_max_retries": None,
        "broker_transport_options": {
            "visibility_timeout": limits.visibility_timeout_s,
            "socket_keepalive": True,
            "health_check_interval": 15,
        },
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
