"""The Celery tasks ``om.flush`` and ``om.reconcile``, their beat schedule, and the enqueue call.

Start a worker with ``celery -A om_workers.jobs.tasks worker -Q om`` (pool and concurrency come from
``OM_*`` settings through :mod:`om_workers.jobs.celery_app`). The app is built on first use, from
the settings of the process that uses it, so importing this module needs no configuration;
``OM_REDIS_URL`` must be set for anything that talks to the broker (several processes cannot
share a private embedded Redis). The broker is ``OM_BROKER_URL`` when set (RabbitMQ:
``amqp://...``), else that Redis; Redis always holds the locks and coalescing markers.

Flush logic lives in :mod:`om_workers.jobs.flush` (testable without Celery); this module only
adapts it: it takes one :class:`~om_workers.jobs.flush.FlushDeps` per worker process from the
composition root (:mod:`om_workers.services`) and turns a flush whose Redis or database was
unreachable before it started into a Celery retry.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Final

import redis

from om_core.settings import resolve_settings
from om_workers import metrics
from om_workers.config import Settings, get_settings
from om_workers.coordination import keys, liveness
from om_workers.coordination.coalesce import FlushTicket
from om_workers.coordination.fairness import FairPublisher, FairQueue
from om_workers.coordination.liveness import LIVENESS
from om_workers.coordination.pool import PoolAdvert
from om_workers.coordination.timing import TimeLimits, resolve_time_limits
from om_workers.errors import ConfigError
from om_workers.jobs.celery_app import QUEUE, Broker, broker_kind, create_celery_app
from om_workers.jobs.flush import (
    FlushDeps,
    FlushOutcome,
    PublishJob,
    request_flush,
    run_flush_job,
)
from om_workers.jobs.reconcile import ReconcileReport, reconcile_once
from om_workers.logs import configure_json_logging, log_context
from om_workers.providers.setup import provider_secrets
from om_workers.services import build_services
from om_workers.store import SqlStore

log = logging.getLogger(__name__)

FLUSH_TASK: Final = "om.flush"
RECONCILE_TASK: Final = "om.reconcile"
RETRY_COUNTDOWN_S: Final = 5.0
"""Wait before retrying a flush whose Redis or database was unreachable; far below any
visibility timeout, because on Redis ``self.retry(countdown=...)`` parks the message unacked in
the worker, where the broker's visibility clock keeps running. On RabbitMQ the retried message
waits in the broker instead (native delayed delivery, whole seconds)."""
MAX_UNAVAILABLE_RETRIES: Final = 6


def time_limits(settings: Settings) -> TimeLimits:
    """The flush time limits (seconds): the ``OM_SOFT_TIME_LIMIT_S``/``OM_HARD_TIME_LIMIT_S``
    pair and ``OM_VISIBILITY_TIMEOUT_S`` where set, the rest derived from the provider retry
    settings (:func:`~om_workers.coordination.timing.resolve_time_limits`).

    With a RabbitMQ broker (``OM_BROKER_URL=amqp://...``) there is no visibility timeout (the
    value only sets the reconciler's stuck-job age), so neither the visibility ordering nor
    the lock TTL bound below apply.

    Raises :class:`ConfigError` when one of the two time limits is set alone, they are out of
    order, the lock TTL is not below the visibility timeout (Redis broker), or
    ``OM_BROKER_URL`` has an unsupported scheme.
    """
    broker = _broker(settings)
    try:
        limits = resolve_time_limits(
            http_timeout_s=settings.llm.http_timeout_s,
            max_attempts=settings.llm.max_attempts,
            backoff_cap_s=settings.llm.backoff_cap_s,
            queue_wait_s=settings.delivery.queue_wait_s,
            soft_time_limit_s=settings.delivery.soft_time_limit_s,
            hard_time_limit_s=settings.delivery.hard_time_limit_s,
            visibility_timeout_s=settings.delivery.visibility_timeout_s,
            visibility_applies=broker == "redis",
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if broker == "redis" and settings.locks.ttl_s >= limits.visibility_timeout_s:
        # A crashed job's redelivered message must find the dead worker's lock expired.
        raise ConfigError("OM_LOCK_TTL_S must be below the visibility timeout")
    return limits


def _broker(settings: Settings) -> Broker:
    """Which broker the settings select: ``OM_BROKER_URL``'s scheme, else Redis.

    Raises :class:`ConfigError` for an unsupported scheme (the message never quotes the URL).
    """
    if not settings.redis.broker_url:
        return "redis"
    try:
        return broker_kind(settings.redis.broker_url)
    except ValueError as exc:
        raise ConfigError(f"OM_BROKER_URL: {exc}") from exc


def _broker_url(settings: Settings) -> str:
    """The Celery broker URL: ``OM_BROKER_URL`` when set, else ``OM_REDIS_URL``.

    Raises :class:`ConfigError` when ``OM_REDIS_URL`` is unset (the locks and coalescing
    markers live there whatever the broker) or ``OM_BROKER_URL`` has an unsupported scheme.
    """
    if not settings.redis.url:
        raise ConfigError(
            "OM_REDIS_URL must be set for Celery workers and publishers (locks and coalescing, "
            "and the broker unless OM_BROKER_URL is set)"
        )
    _broker(settings)
    return settings.redis.broker_url or settings.redis.url


def stale_pending_age_s(settings: Settings) -> float:
    """Age in seconds after which an unlocked ``pending`` marker is re-published: two lock TTLs,
    so a crashed holder's lock has surely expired and the marker's own message had its turn."""
    return 2 * settings.locks.ttl_s


def stuck_job_age_s(settings: Settings) -> float:
    """Age in seconds after which a ``running`` job is swept as failed: past the visibility
    timeout plus a lock TTL, so Redis redelivered its message and the second attempt had its
    chance (on RabbitMQ, which redelivers at once, never below the hard time limit plus a lock
    TTL)."""
    limits = time_limits(settings)
    return max(limits.visibility_timeout_s, limits.hard_time_limit_s) + settings.locks.ttl_s


@lru_cache(maxsize=1)
def get_app() -> Any:
    """The process's Celery app with ``om.flush``, ``om.reconcile`` and the beat schedule.

    The broker is ``OM_BROKER_URL`` when set, else ``OM_REDIS_URL`` (see
    :mod:`om_workers.jobs.celery_app` for what each gets). Raises :class:`ConfigError` when
    ``OM_REDIS_URL`` is unset, ``OM_BROKER_URL`` has an unsupported scheme or the time limits
    are invalid. Call ``get_app.cache_clear()`` (and ``get_settings.cache_clear()``) to rebuild.
    """
    settings = get_settings()
    limits = time_limits(settings)
    app = create_celery_app(
        broker_url=_broker_url(settings),
        limits=limits,
        concurrency=settings.worker.concurrency,
    )
    if _broker(settings) == "redis":
        # kombu sweeps unacked messages (a killed worker's) back to the queue only every
        # interval * throttle seconds (10 s * 10 by default), on top of the visibility timeout;
        # scan on every sweep, and sweep often enough that recovery waits mostly on the timeout.
        # Redis transport only: RabbitMQ requeues a dead consumer's messages itself, at once.
        app.conf.broker_transport_options.update(
            unacked_restore_throttle=1,
            unacked_restore_interval=max(1.0, min(10.0, limits.visibility_timeout_s / 4)),
        )
    app.conf.beat_schedule = {
        RECONCILE_TASK: {"task": RECONCILE_TASK, "schedule": settings.delivery.reconcile_interval_s}
    }
    _register(app)
    _connect_worker_init()
    return app


def publisher(app: Any) -> PublishJob:
    """A :data:`~om_workers.jobs.flush.PublishJob` that sends ``om.flush`` through ``app``."""

    def publish(tenant_id: str, session_id: str, job_id: str) -> None:
        app.send_task(FLUSH_TASK, args=[tenant_id, session_id, job_id, False], queue=QUEUE)

    return publish


def enqueue_flush(
    store: SqlStore,
    client: redis.Redis,
    tenant_id: str,
    session_id: str,
    force: bool = False,
    *,
    app: Any = None,
    fair: bool = True,
) -> FlushTicket:
    """Request a flush of the session; returns the job id serving it and whether it coalesced.

    See :func:`om_workers.jobs.flush.request_flush` (a coalesced request writes no job row).
    ``app`` defaults to :func:`get_app`; ``fair`` puts the job through the fair queue on
    ``client`` (capacity: the live workers' slots), as the API does by default. Raises what
    that function raises, and whatever the broker raises when ``om.flush`` cannot be sent
    (the new job row is then failed).
    """
    publish = publisher(app if app is not None else get_app())
    if fair:
        publish = FairPublisher(FairQueue(client), publish)
    return request_flush(store, client, tenant_id, session_id, publish=publish, force=force)


@lru_cache(maxsize=1)
def worker_deps() -> FlushDeps:
    """The flush dependencies of this worker process, built on first use from the process's
    :func:`~om_workers.services.build_services` (one store, one Redis client, the provider) and
    its publisher (the app's, behind the fair queue unless ``OM_FAIR_QUEUEING`` is off; see
    :meth:`~om_workers.services.Services.flush_deps`).

    Raises :class:`ConfigError` when ``OM_REDIS_URL`` is unset or ``OM_PROVIDER`` is bad: the
    first task fails, loudly."""
    services = build_services(get_settings())
    return services.flush_deps(services.publisher(publisher(get_app())))


def _fair_queue() -> FairPublisher | None:
    """The worker's fair-queue publisher, ``None`` when fair queueing is off."""
    publish = worker_deps().publish
    return publish if isinstance(publish, FairPublisher) else None


def _flush_task(
    self: Any, tenant_id: str, session_id: str, job_id: str, force: bool = False
) -> str:
    """``om.flush``: run one flush job (see :func:`om_workers.jobs.flush.run_flush_job`).

    Its place in the fair queue is marked running when the message starts and freed when the
    message is finished with, whatever the outcome, except when Celery retries it (the retried
    message keeps the place)."""
    with log_context(job_id=job_id, tenant_id=tenant_id, session_id=session_id):
        fair = _fair_queue()
        if fair is not None:
            _quietly("marking a flush job running", fair.started, job_id, LIVENESS.worker_id)
        retrying = False
        try:
            outcome = run_flush_job(worker_deps(), tenant_id, session_id, job_id, force)
            retry = _retry(outcome, tenant_id, session_id, self.request.retries)
            if retry is not None:
                countdown_s, max_retries = retry
                retrying = (self.request.retries or 0) < max_retries
                raise self.retry(countdown=countdown_s, max_retries=max_retries)
        finally:
            if fair is not None and not retrying:
                _quietly("freeing a flush job's place", fair.finished, job_id)
    log.debug("flush %s of %s/%s: %s", job_id, tenant_id, session_id, outcome.outcome)
    # The task's result is what Flower shows: the outcome, and why a flush did nothing.
    return f"{outcome.outcome}: {outcome.reason}" if outcome.reason else outcome.outcome


def _quietly(what: str, step: Callable[..., None], *args: str) -> None:
    """Run a fair-queue step; a failure costs fairness, never the job (the reconciler's sweep
    frees a place that was not freed), so it is logged, not raised."""
    try:
        step(*args)
    except Exception:
        log.warning("%s failed; the reconciler's sweep heals it", what, exc_info=True)


def _retry(
    outcome: FlushOutcome, tenant_id: str, session_id: str, retries: int | None
) -> tuple[float, int] | None:
    """``(countdown seconds, max retries)`` when the message is to be retried, else ``None``.

    A job whose Redis or database was down before it started is tried again shortly instead of
    acking a message that did nothing; a message RabbitMQ gave back while its dead worker's
    lock is still held waits for that lock (:func:`_redelivered_into_a_held_lock`)."""
    if outcome.outcome == "unavailable":
        return RETRY_COUNTDOWN_S, MAX_UNAVAILABLE_RETRIES
    wait_s = _redelivered_into_a_held_lock(outcome, tenant_id, session_id, retries)
    if wait_s is not None:
        return wait_s, _busy_retry_limit(get_settings())
    return None


def _redelivered_into_a_held_lock(
    outcome: FlushOutcome, tenant_id: str, session_id: str, retries: int | None
) -> int | None:
    """Whole seconds to wait before retrying a message that met a busy session lock while its
    job is still ``running``, on a RabbitMQ broker; ``None``: keep the ``busy`` outcome (ack).

    RabbitMQ gives a killed worker's message back the moment its connection drops, while that
    worker's session lock lives on until its holder's liveness key expires (a few seconds) or
    its own TTL passes: dropped at the busy lock, the message would leave its job ``running``
    until the reconciler swept it. So it is retried once the sooner of the two has passed (at
    least 1 s, at most the lock TTL; the retried message waits in the broker, native delayed
    delivery), and then takes the dead holder's lock over. On Redis the visibility timeout
    exceeds the lock TTL, so a redelivered message never meets the dead worker's lock.

    A duplicate of a job that a live worker is running is retried the same way until that job
    ends (then it is ``skipped``), while ``retries`` (the message's retry count) is below
    :func:`_busy_retry_limit`, then dropped as busy. An unreadable job row means ``None``, an
    unreadable lock TTL the full lock TTL; raises only the :class:`ConfigError` of invalid
    settings, which :func:`get_app` has already refused in a running worker.
    """
    settings = get_settings()
    if outcome.outcome != "busy" or _broker(settings) != "amqp":
        return None
    if (retries or 0) >= _busy_retry_limit(settings):
        return None
    deps = worker_deps()
    try:
        if deps.store.get_job(tenant_id, outcome.job_id).state != "running":
            return None  # queued: the lock holder reads the session after it and serves it
    except Exception:  # the row cannot be read: drop as busy, the reconciler heals the job
        log.warning("flush %s met a busy lock and its row could not be read", outcome.job_id)
        return None
    ceiling = max(1, math.ceil(deps.lock_ttl_s))
    try:
        wait_ms = liveness.takeover_wait_ms(deps.redis, keys.lock_key(tenant_id, session_id))
    except Exception:  # Redis hiccup: the lock expires within its TTL at the latest
        return ceiling
    return min(ceiling, max(1, math.ceil(wait_ms / 1000)))


def _busy_retry_limit(settings: Settings) -> int:
    """Retries of a message past a held lock: enough lock TTLs to outlast the longest flush job
    (``ceil(hard time limit / lock TTL) + 1``). Passed to Celery as ``max_retries`` too (its
    ``None`` means the task's default of 3, not unlimited). Raises like :func:`time_limits`."""
    return math.ceil(time_limits(settings).hard_time_limit_s / settings.locks.ttl_s) + 1


def _reconcile_task() -> dict[str, list[str]]:
    """``om.reconcile``: one :func:`reconcile_once` pass with this process's settings."""
    settings = get_settings()
    deps = worker_deps()
    report = reconcile_once(
        deps.store,
        deps.redis,
        deps.publish,
        stale_pending_s=stale_pending_age_s(settings),
        stuck_job_s=stuck_job_age_s(settings),
        lost_after_s=liveness.ttl_s(settings.locks.ttl_s),
        unobserved_threshold=unobserved_threshold(settings),
    )
    return {
        "republished": list(report.republished),
        "failed_jobs": list(report.failed_jobs),
        "requested": list(report.requested),
    }


def unobserved_threshold(settings: Settings) -> int:
    """Unobserved tokens from which the reconciler requests a flush: the observer's own
    ``observation.messageTokens`` from ``OM_SETTINGS_JSON`` (below it a flush observes
    nothing). Raises ``pydantic.ValidationError`` for invalid memory settings."""
    return resolve_settings(dict(settings.memory_settings)).observation.message_tokens


def start_worker_metrics(**_: Any) -> None:
    """Celery ``worker_init`` handler: serve :mod:`om_workers.metrics` on
    ``OM_WORKER_METRICS_PORT`` (0: off) at ``OM_WORKER_METRICS_HOST``. A port that cannot be
    bound is logged, not fatal: losing metrics must not stop a worker from flushing."""
    settings = get_settings()
    try:
        metrics.serve(settings.worker.metrics_port, settings.worker.metrics_host)
    except OSError:
        log.exception("worker metrics port %d not served", settings.worker.metrics_port)


def setup_json_logging(loglevel: Any = None, **_: Any) -> None:
    """Celery ``setup_logging`` handler (worker and beat): every record as a redacted JSON
    line (:mod:`om_workers.logs`), the provider key among the secrets. Connecting it keeps
    Celery from installing its own plain-text handlers."""
    settings = get_settings()
    level = loglevel if isinstance(loglevel, str) else settings.log_level
    secrets = tuple(provider_secrets(settings))
    configure_json_logging([None], level, lambda: secrets)


_POOL: list[PoolAdvert] = []
"""The process's pool advertisement, once its worker is ready."""


def join_pool(sender: Any = None, **_: Any) -> None:
    """Celery ``worker_ready`` handler: advertise this process's task slots (the pool's
    concurrency) as fair-queue capacity while it lives, and send what the fair queue admits
    once they count. Nothing when fair queueing is off. A failure is logged: the worker still
    serves what other processes admit, and its advertisement beat retries."""
    if not get_settings().fair_queue.enabled:
        return
    try:
        fair = _fair_queue()
        controller = getattr(sender, "controller", None)
        slots = int(getattr(controller, "concurrency", None) or get_settings().worker.concurrency)
        advert = PoolAdvert(
            worker_deps().redis, LIVENESS.worker_id, slots, joined=fair.fill if fair else None
        )
        advert.start()
        _POOL.append(advert)
    except Exception:
        log.exception("could not join the worker pool; the fair queue does not count its slots")


def leave_pool(**_: Any) -> None:
    """Celery ``worker_shutdown`` handler: withdraw this process's slots (they would expire
    by themselves a few seconds later)."""
    while _POOL:
        _POOL.pop().stop()


def _connect_worker_init() -> None:
    from celery.signals import (  # type: ignore[import-untyped]
        setup_logging,
        worker_init,
        worker_ready,
        worker_shutdown,
    )

    # dispatch_uid: rebuilding the app (tests) must not start a second server.
    worker_init.connect(start_worker_metrics, weak=False, dispatch_uid="om-worker-metrics")
    setup_logging.connect(setup_json_logging, weak=False, dispatch_uid="om-json-logging")
    worker_ready.connect(join_pool, weak=False, dispatch_uid="om-pool-join")
    worker_shutdown.connect(leave_pool, weak=False, dispatch_uid="om-pool-leave")


def _register(app: Any) -> None:
    # Registered by call, not as decorators: Celery is untyped, and the plain functions stay
    # typed and importable.
    app.task(name=FLUSH_TASK, bind=True)(_flush_task)
    app.task(name=RECONCILE_TASK)(_reconcile_task)


def __getattr__(name: str) -> Any:
    # ``celery -A om_workers.jobs.tasks`` looks up ``app`` here; building it lazily keeps importing
    # this module free of configuration.
    if name in ("app", "celery"):
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FLUSH_TASK",
    "RECONCILE_TASK",
    "ReconcileReport",
    "enqueue_flush",
    "get_app",
    "publisher",
    "reconcile_once",
    "stale_pending_age_s",
    "start_worker_metrics",
    "stuck_job_age_s",
    "time_limits",
    "unobserved_threshold",
    "worker_deps",
]
