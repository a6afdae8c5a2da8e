"""A worker that gets its broker connection back asks for a reconciler pass at once.

While the broker (Redis or RabbitMQ) was out, flush requests were refused and runs were cut
short; what they left (unobserved messages, stale markers, jobs of dead runs) is healed by the
reconciler, which beat runs only every ``OM_RECONCILE_INTERVAL_S``. A consumer bootstep starts
again each time the worker's consumer reconnects, so it is where a worker learns that the
broker is back: it then publishes ``om.reconcile`` (one pass for every worker reconnecting at
that moment, :func:`om_workers.jobs.reconcile.request_reconcile_soon`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis
from celery import bootsteps  # type: ignore[import-untyped]

from om_workers.celery.config import QUEUE
from om_workers.celery.tasks import RECONCILE_TASK
from om_workers.jobs.reconcile import request_reconcile_soon

log = logging.getLogger(__name__)


def reconcile_on_reconnect(redis_client: Callable[[], redis.Redis]) -> type:
    """A consumer bootstep class that, on every consumer start after the first (a reconnect),
    asks for a reconciler pass from a thread of its own (the consumer does not wait on Redis);
    ``redis_client`` gives the process's Redis client. A failure is logged: the scheduled pass
    heals the same, later."""

    class ReconcileOnReconnect(bootsteps.StartStopStep):  # type: ignore[misc]
        requires = ("celery.worker.consumer.tasks:Tasks",)
        starts = 0

        def start(self, parent: Any) -> None:
            type(self).starts += 1
            if type(self).starts == 1:
                return  # the worker's first connection: beat's schedule covers a fresh start
            app = parent.app
            threading.Thread(
                target=_ask, args=(app, redis_client), name="om-reconcile-soon", daemon=True
            ).start()

    return ReconcileOnReconnect


def _ask(app: Any, redis_client: Callable[[], redis.Redis]) -> None:
    try:
        sent = request_reconcile_soon(
            redis_client(), lambda: app.send_task(RECONCILE_TASK, queue=QUEUE)
        )
    except Exception:
        log.warning("could not ask for a reconciler pass after reconnecting", exc_info=True)
        return
    if sent:
        log.info("broker connection back: asked for a reconciler pass")


__all__ = ["reconcile_on_reconnect"]
