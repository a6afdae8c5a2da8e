"""The process's Celery app and flush dependencies, built on first use: the entry point of
``celery -A om_workers.celery.app worker -Q om`` (pool and concurrency from the ``OM_*``
settings), and what the API and the command line publish through.

Importing this module needs no configuration; ``OM_REDIS_URL`` must be set for anything that
talks to the broker (several processes cannot share a private embedded Redis). The broker is
``OM_BROKER_URL`` when set (RabbitMQ: ``amqp://...``), else that Redis; Redis always holds the
locks and coalescing markers.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import redis

from om_workers.celery import startup
from om_workers.celery.config import create_celery_app
from om_workers.celery.healing import reconcile_on_reconnect
from om_workers.celery.limits import broker_of, broker_url, time_limits
from om_workers.celery.tasks import RECONCILE_TASK, RETENTION_TASK, publisher, register
from om_workers.celery.wakeup import WakeForShutdown
from om_workers.celery.webhooks import register_webhooks
from om_workers.config import get_settings
from om_workers.coordination.coalesce import ServingJob
from om_workers.coordination.fairness import FairPublisher, FairQueue
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.requests import request_flush
from om_workers.services import build_services
from om_workers.store import SqlStore


@lru_cache(maxsize=1)
def get_app() -> Any:
    """The process's Celery app with ``om.flush``, ``om.erase``, ``om.reconcile``,
    ``om.retention``, ``om.webhook`` and the beat schedule.

    The broker is ``OM_BROKER_URL`` when set, else ``OM_REDIS_URL`` (see
    :mod:`om_workers.celery.config` for what each gets). Raises :class:`ConfigError` when
    ``OM_REDIS_URL`` is unset, ``OM_BROKER_URL`` has an unsupported scheme or the time limits
    are invalid. Call ``get_app.cache_clear()`` (and ``get_settings.cache_clear()``) to rebuild.
    """
    settings = get_settings()
    limits = time_limits(settings)
    app = create_celery_app(
        broker_url=broker_url(settings),
        limits=limits,
        concurrency=settings.worker.concurrency,
    )
    if broker_of(settings) == "redis":
        # kombu sweeps unacked messages (a killed worker's) back to the queue only every
        # interval * throttle seconds (10 s * 10 by default), on top of the visibility timeout;
        # scan on every sweep, and sweep often enough that recovery waits mostly on the timeout.
        # Redis transport only: RabbitMQ requeues a dead consumer's messages itself, at once.
        app.conf.broker_transport_options.update(
            unacked_restore_throttle=1,
            unacked_restore_interval=max(1.0, min(10.0, limits.visibility_timeout_s / 4)),
        )
    app.conf.beat_schedule = {
        RECONCILE_TASK: {
            "task": RECONCILE_TASK,
            "schedule": settings.delivery.reconcile_interval_s,
        },
        RETENTION_TASK: {
            "task": RETENTION_TASK,
            "schedule": settings.erasure.retention_interval_s,
        },
    }
    register(app, worker_deps)
    register_webhooks(app, worker_deps)
    app.steps["consumer"].add(reconcile_on_reconnect(lambda: worker_deps().redis))
    app.steps["consumer"].add(WakeForShutdown)
    startup.connect(worker_deps)
    return app


@lru_cache(maxsize=1)
def worker_deps() -> FlushDeps:
    """The flush dependencies of this process, built on first use from its
    :func:`~om_workers.services.build_services` (one store, one Redis client, the provider) and
    its publisher (the app's, which declares nothing: the worker consumes the queue it
    publishes to; behind the fair queue unless ``OM_FAIR_QUEUEING`` is off; see
    :meth:`~om_workers.services.Services.flush_deps`).

    Raises :class:`ConfigError` when ``OM_REDIS_URL`` is unset or ``OM_PROVIDER`` is bad: the
    first task fails, loudly."""
    services = build_services(get_settings())
    return services.flush_deps(services.publisher(publisher(get_app(), declared=True)))


def enqueue_flush(
    store: SqlStore,
    client: redis.Redis,
    tenant_id: str,
    session_id: str,
    force: bool = False,
    *,
    app: Any = None,
    fair: bool = True,
) -> ServingJob:
    """Request a flush of the session; returns the job id serving it and whether it coalesced.

    See :func:`om_workers.jobs.requests.request_flush` (a coalesced request writes no job row).
    ``app`` defaults to :func:`get_app`; ``fair`` puts the job through the fair queue on
    ``client`` (capacity: the live workers' slots), as the API does by default. Raises what
    that function raises, and whatever the broker raises when ``om.flush`` cannot be sent
    (the new job row is then failed).
    """
    publish = publisher(app if app is not None else get_app())
    if fair:
        publish = FairPublisher(FairQueue(client), publish)
    return request_flush(store, client, tenant_id, session_id, publish=publish, force=force)


def __getattr__(name: str) -> Any:
    # ``celery -A om_workers.celery.app`` looks up ``app`` here; building it lazily keeps
    # importing this module free of configuration.
    if name in ("app", "celery"):
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["enqueue_flush", "get_app", "worker_deps"]
