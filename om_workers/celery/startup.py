"""A worker process's start-up and shutdown, as Celery signal handlers: the Prometheus metrics
server, traces, JSON logs, the task slots it advertises to the fair queue while it lives, and
its watch for runs of dead workers."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from om_workers import heap, metrics
from om_workers.celery.tasks import fair_publisher
from om_workers.config import get_settings
from om_workers.coordination.liveness import LIVENESS
from om_workers.coordination.pool import PoolAdvert
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.lost_runs import LostRunWatch
from om_workers.logs import configure_json_logging
from om_workers.providers.setup import provider_secrets
from om_workers.telemetry.tracing import configure_tracing, shutdown_tracing

log = logging.getLogger(__name__)

_POOL: list[PoolAdvert] = []
"""The process's pool advertisement, once its worker is ready."""
_WATCHES: list[LostRunWatch] = []
"""The process's watch for runs of dead workers, once its worker is ready."""


def start_worker_metrics(**_: Any) -> None:
    """``worker_init`` handler: serve :mod:`om_workers.metrics` on ``OM_WORKER_METRICS_PORT``
    (0: off) at ``OM_WORKER_METRICS_HOST``. A port that cannot be bound is logged, not fatal:
    losing metrics must not stop a worker from flushing."""
    settings = get_settings()
    try:
        metrics.serve(settings.worker.metrics_port, settings.worker.metrics_host)
    except OSError:
        log.exception("worker metrics port %d not served", settings.worker.metrics_port)


def start_tracing(**_: Any) -> None:
    """``worker_init`` and ``worker_process_init`` handler: traces on when the ``OTEL_*``
    environment asks (:mod:`om_workers.telemetry.tracing`; a prefork child starts its own
    exporter). A refused ``OTEL_*`` value is logged, not fatal: a worker without traces still
    flushes."""
    try:
        configure_tracing("om-worker")
    except ValueError:
        log.exception("tracing not started: an OTEL_* setting was refused")


def quiet_sent_events(sender: Any = None, **_: Any) -> None:
    """``worker_init`` handler: what a worker publishes (the flush jobs the fair queue admits
    when a place frees, a flush requested meanwhile, webhooks) sends no ``task-sent`` event.
    The task's own ``task-received`` event, from the worker that takes it, lists it in Flower
    as one sent by the API does; the event cost a worker a second round trip to Redis and
    about as much CPU as the publish itself, on every flush job it admits."""
    app = getattr(sender, "app", None)
    if app is not None:
        app.conf.task_send_sent_event = False


def stop_tracing(**_: Any) -> None:
    """``worker_shutdown`` and ``worker_process_shutdown`` handler: export the spans still
    buffered before the process ends."""
    shutdown_tracing()


def setup_json_logging(loglevel: Any = None, **_: Any) -> None:
    """``setup_logging`` handler (worker and beat): every record as a redacted JSON line
    (:mod:`om_workers.logs`), the provider key among the secrets, at the level Celery was
    started with (``--loglevel``, which ``om worker --log-level`` sets; ``OM_LOG_LEVEL`` when
    it gave none). Connecting it keeps Celery from installing its own plain-text handlers."""
    settings = get_settings()
    # Celery sends the level as a number (its option already parsed); None when sent without.
    level = logging.getLevelName(loglevel) if isinstance(loglevel, int) else settings.log_level
    secrets = tuple(provider_secrets(settings))
    configure_json_logging([None], level, lambda: secrets)


def join_pool(deps: Callable[[], FlushDeps], sender: Any = None) -> None:
    """``worker_ready`` handler: advertise this process's task slots (the pool's concurrency)
    as fair-queue capacity while it lives, and send what the fair queue admits once they count.
    Nothing when fair queueing is off. A failure is logged: the worker still serves what other
    processes admit, and its advertisement beat retries."""
    if not get_settings().fair_queue.enabled:
        return
    try:
        fair = fair_publisher(deps())
        controller = getattr(sender, "controller", None)
        slots = int(getattr(controller, "concurrency", None) or get_settings().worker.concurrency)
        advert = PoolAdvert(
            deps().redis, LIVENESS.worker_id, slots, joined=fair.fill if fair else None
        )
        advert.start()
        _POOL.append(advert)
    except Exception:
        log.exception("could not join the worker pool; the fair queue does not count its slots")


def watch_lost_runs(deps: Callable[[], FlushDeps]) -> None:
    """``worker_ready`` handler: look for runs of dead workers every few seconds while this
    process lives (:mod:`om_workers.jobs.lost_runs`)."""
    watch = LostRunWatch(deps)
    watch.start()
    _WATCHES.append(watch)


def leave_pool(**_: Any) -> None:
    """``worker_shutdown`` handler: withdraw this process's slots (they would expire by
    themselves a few seconds later) and stop looking for lost runs."""
    while _POOL:
        _POOL.pop().stop()
    while _WATCHES:
        _WATCHES.pop().stop()


def settle_heap(**_: Any) -> None:
    """``worker_ready`` and ``worker_process_init`` handler: what the process built at start
    stays out of the garbage collector's sight (:func:`om_workers.heap.settle`)."""
    heap.settle()


def connect(deps: Callable[[], FlushDeps]) -> None:
    """Connect the handlers above; ``deps`` is the process's dependency factory. Connecting
    twice is harmless (``dispatch_uid``): rebuilding the app (tests) must not start a second
    metrics server."""
    from celery.signals import (  # type: ignore[import-untyped]
        setup_logging,
        worker_init,
        worker_process_init,
        worker_process_shutdown,
        worker_ready,
        worker_shutdown,
    )

    def ready(sender: Any = None, **_: Any) -> None:
        join_pool(deps, sender)
        watch_lost_runs(deps)

    worker_init.connect(start_worker_metrics, weak=False, dispatch_uid="om-worker-metrics")
    setup_logging.connect(setup_json_logging, weak=False, dispatch_uid="om-json-logging")
    worker_ready.connect(ready, weak=False, dispatch_uid="om-pool-join")
    worker_ready.connect(settle_heap, weak=False, dispatch_uid="om-heap")
    worker_process_init.connect(settle_heap, weak=False, dispatch_uid="om-heap-child")
    worker_shutdown.connect(leave_pool, weak=False, dispatch_uid="om-pool-leave")
    worker_init.connect(quiet_sent_events, weak=False, dispatch_uid="om-quiet-sent-events")
    worker_init.connect(start_tracing, weak=False, dispatch_uid="om-tracing")
    worker_process_init.connect(start_tracing, weak=False, dispatch_uid="om-tracing-child")
    worker_shutdown.connect(stop_tracing, weak=False, dispatch_uid="om-tracing-stop")
    worker_process_shutdown.connect(stop_tracing, weak=False, dispatch_uid="om-tracing-child-stop")


__all__ = [
    "connect",
    "join_pool",
    "leave_pool",
    "quiet_sent_events",
    "setup_json_logging",
    "start_tracing",
    "start_worker_metrics",
    "stop_tracing",
    "watch_lost_runs",
]
