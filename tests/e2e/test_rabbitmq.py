"""RabbitMQ as the Celery broker (``OM_BROKER_URL=amqp://...``), Redis for locks and coalescing.

The configuration tests need no broker. The end-to-end tests run real ``celery worker``
processes against the machine's RabbitMQ (127.0.0.1:5672, each test in a fresh virtual host,
deleted afterwards), the shared private Redis and a SQLite file, and are skipped when nothing
answers on 5672. Waits are bounded polls; the one timing that matters (kill to served again) is
printed, and only bounded generously.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from om_workers.celery import limits, tasks
from om_workers.celery.app import enqueue_flush
from om_workers.celery.config import QUEUE, broker_kind, celery_config, create_celery_app
from om_workers.celery.limits import time_limits
from om_workers.celery.tasks import publisher
from om_workers.config import Settings
from om_workers.coordination import keys
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.coordination.timing import TimeLimits
from om_workers.errors import ConfigError
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.flush import FlushOutcome
from om_workers.jobs.requests import request_flush
from om_workers.store import SqlStore
from tests.e2e.rabbitmq import AMQP_PORT, answers, fresh_vhost, queue_facts
from tests.e2e.support import (
    LOW,
    add_chat,
    assert_observed_once,
    covered_sources,
    fully_observed,
    wait_for,
)
from tests.e2e.workers import StartWorker, Worker, runs_of, settled, worker_env

LIMITS = TimeLimits(60, 70, 80, 90)
AMQP = "amqp://guest:guest@127.0.0.1:5672/om"
SERVED_AGAIN_BOUND_S = 60.0
"""A generous bound on kill -> served again; the goal (<= 10 s) is printed, not asserted."""

needs_rabbitmq = pytest.mark.skipif(
    not answers(AMQP_PORT),
    reason="RabbitMQ does not answer on 127.0.0.1:5672 (start it: rabbitmq-server -detached)",
)


# --- configuration, no broker needed ---------------------------------------------------------


def test_amqp_config_declares_a_quorum_queue_with_publisher_confirms() -> None:
    conf = celery_config(broker_url=AMQP, limits=LIMITS, concurrency=16)
    assert conf["broker_transport_options"] == {"confirm_publish": True}  # no Redis options
    assert conf["task_acks_late"] is True and conf["task_reject_on_worker_lost"] is True
    assert conf["worker_prefetch_multiplier"] == 1
    assert conf["worker_detect_quorum_queues"] is True
    app = create_celery_app(broker_url=AMQP, limits=LIMITS, concurrency=16)
    queue = app.amqp.queues[QUEUE]
    assert queue.queue_arguments == {"x-queue-type": "quorum"} and queue.durable
    assert queue.exchange.type == "topic" and queue.exchange.durable  # native delayed delivery
    assert queue.routing_key == QUEUE
    app.close()


def test_visibility_ordering_applies_to_redis_only() -> None:
    unordered = TimeLimits(10, 20, 30, 5)  # visibility below the hard limit
    celery_config(broker_url=AMQP, limits=unordered, concurrency=1)
    with pytest.raises(ValueError, match="visibility_timeout_s"):
        celery_config(broker_url="redis://127.0.0.1:1/0", limits=unordered, concurrency=1)
    with pytest.raises(ValueError, match="soft_time_limit_s"):
        celery_config(broker_url=AMQP, limits=TimeLimits(10, 40, 30, 50), concurrency=1)
    with pytest.raises(ValueError, match="unsupported broker scheme 'sqs'"):
        celery_config(broker_url="sqs://key:secret@", limits=LIMITS, concurrency=1)
    assert broker_kind("amqps://h/v") == broker_kind("pyamqp://h") == "amqp"


def test_broker_selection_from_settings() -> None:
    redis_only = Settings(redis_url="redis://r:6379/0")
    assert limits.broker_url(redis_only) == "redis://r:6379/0"
    assert limits.broker_url(Settings(redis_url="redis://r:6379/0", broker_url="")) == (
        "redis://r:6379/0"
    )
    rabbit = Settings(redis_url="redis://r:6379/0", broker_url=AMQP, lock_ttl_s=600)
    assert limits.broker_url(rabbit) == AMQP
    time_limits(rabbit)  # lock TTL above the visibility timeout: irrelevant on RabbitMQ
    with pytest.raises(ConfigError, match="below the visibility timeout"):
        time_limits(Settings(redis_url="redis://r:6379/0", lock_ttl_s=10_000))
    two = Settings(broker_url=AMQP, http_timeout_s=2, soft_time_limit_s=20, hard_time_limit_s=25)
    assert time_limits(two).hard_time_limit_s == 25  # no visibility timeout needed
    with pytest.raises(ConfigError, match="OM_REDIS_URL"):
        limits.broker_url(Settings(broker_url=AMQP))  # locks and coalescing still need Redis
    with pytest.raises(ConfigError, match="unsupported broker scheme") as caught:
        limits.broker_url(Settings(redis_url="redis://r", broker_url="kafka://u:pw@h"))
    assert "pw" not in str(caught.value)


class _Retry(Exception):
    """What the fake task's ``retry`` raises, with the arguments it got."""

    def __init__(self, **options: Any) -> None:
        super().__init__(options)
        self.options = options


class _FakeTask:
    def __init__(self, retries: int) -> None:
        self.request = SimpleNamespace(retries=retries)

    def retry(self, **options: Any) -> _Retry:
        return _Retry(**options)


@pytest.mark.parametrize("broker", ["amqp", "redis"])
def test_a_redelivery_into_a_dead_workers_lock_waits_for_it_on_rabbitmq_only(
    monkeypatch: pytest.MonkeyPatch, broker: str
) -> None:
    settings = Settings(
        redis_url="redis://r:6379/0",
        broker_url=AMQP if broker == "amqp" else None,
        lock_ttl_s=2,
        http_timeout_s=2,
        soft_time_limit_s=20,
        hard_time_limit_s=25,
        visibility_timeout_s=30,
    )
    deps = SimpleNamespace(
        store=SimpleNamespace(get_job=lambda tenant, job: SimpleNamespace(state="running")),
        redis=SimpleNamespace(get=lambda key: "a-token-naming-no-worker", pttl=lambda key: 1_200),
        lock_ttl_s=2.0,
        publish=lambda *job: None,  # a plain publisher: no fair queue
    )
    monkeypatch.setattr(tasks, "get_settings", lambda: settings)
    monkeypatch.setattr(tasks, "run_flush_job", lambda *a, **k: FlushOutcome("busy", "j1", "j1"))
    if broker == "redis":  # the visibility timeout outlasts the lock: dropped as busy
        assert tasks.flush_task(_FakeTask(0), deps, "t", "s", "j1") == "busy"
        return
    limit = limits.busy_retry_limit(settings)
    assert limit == 14  # ceil(25 s / 2 s) + 1: outlasts a live duplicate's longest run
    with pytest.raises(_Retry) as retried:
        tasks.flush_task(_FakeTask(limit - 1), deps, "t", "s", "j1")
    # The remaining 1.2 s of the lock, in whole seconds; an explicit max_retries, since
    # Celery reads None as the task's default of 3.
    assert retried.value.options == {"countdown": 2, "max_retries": limit}
    assert tasks.flush_task(_FakeTask(limit), deps, "t", "s", "j1") == "busy"


class _Delivered(_FakeTask):
    """A fake task whose message RabbitMQ flagged ``redelivered`` (or not)."""

    def __init__(self, retries: int, redelivered: bool) -> None:
        super().__init__(retries)
        self.request.delivery_info = {"redelivered": redelivered}


def test_a_redelivered_queued_job_waits_for_the_dead_workers_lock_then_runs(
    monkeypatch: pytest.MonkeyPatch, store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    settings = Settings(
        redis_url="redis://r:6379/0",
        broker_url=AMQP,
        lock_ttl_s=2,
        http_timeout_s=2,
        soft_time_limit_s=20,
        hard_time_limit_s=25,
    )
    monkeypatch.setattr(tasks, "get_settings", lambda: settings)
    store.create_session(tenant, "s1")
    chat = add_chat(store, tenant, "s1", 2)
    deps = FlushDeps(
        store=store, redis=client, publish=lambda *job: None, memory_settings=LOW, lock_ttl_s=2.0
    )
    job = request_flush(store, client, tenant, "s1", publish=deps.publish).job_id
    # A worker took the message, the lock and the marker, and was killed before it started the
    # job: its liveness key outlives it by a moment, and RabbitMQ gives the message back at once.
    dead = "killed-host-1-0badf00d"
    client.set(keys.worker_key(dead), "1", px=1_500)
    client.set(keys.lock_key(tenant, "s1"), f"{dead}/0123", px=2_000)
    client.delete(keys.pending_key(tenant, "s1"))
    # A first delivery meeting a busy lock leaves a queued job to the holder, as before.
    assert tasks.flush_task(_Delivered(0, False), deps, tenant, "s1", job) == "busy"
    # The redelivered copy is retried once the dead holder's liveness key is gone.
    with pytest.raises(_Retry) as retried:
        tasks.flush_task(_Delivered(0, True), deps, tenant, "s1", job)
    # Whole seconds until the key expires (1.5 s when set), never beyond the lock TTL.
    assert retried.value.options["max_retries"] == 14
    assert retried.value.options["countdown"] in (1, 2)
    assert store.get_job(tenant, job).state == "queued"
    wait_for(lambda: not client.exists(keys.worker_key(dead)), 10.0, "the liveness key expired")
    assert tasks.flush_task(_Delivered(1, False), deps, tenant, "s1", job) == "succeeded"
    assert sorted(covered_sources(store, tenant, "s1")) == sorted(chat)


# --- end to end on the machine's RabbitMQ ----------------------------------------------------


@pytest.fixture
def amqp_url() -> Iterator[str]:
    """A fresh virtual host on the local RabbitMQ, deleted (with every message) afterwards."""
    with fresh_vhost() as url:
        yield url


@pytest.fixture
def amqp_app(amqp_url: str) -> Iterator[Any]:
    """The API's side of ``om.flush`` on RabbitMQ: a publishing Celery app."""
    app = create_celery_app(broker_url=amqp_url, limits=LIMITS, concurrency=1)
    yield app
    app.close()


@pytest.fixture
def start_amqp_worker(
    amqp_url: str, redis_server: EmbeddedRedis, database_url: str, tmp_path: Path
) -> Iterator[StartWorker]:
    """Starts ``celery worker`` processes brokered by RabbitMQ, with locks and coalescing on
    the test Redis; all stopped (before the vhost goes) afterwards."""
    started: list[Worker] = []
    names = itertools.count(1)

    def start(**env: str) -> Worker:
        name = f"rmq{next(names)}"
        environment = worker_env(redis_server.url, database_url, OM_BROKER_URL=amqp_url, **env)
        worker = Worker(name, environment, tmp_path / f"{name}.log")
        started.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in started:
        worker.stop()


@needs_rabbitmq
def test_flushes_through_a_rabbitmq_brokered_worker_finish(
    amqp_url: str, amqp_app: Any, start_amqp_worker: StartWorker, store: SqlStore,
    client: redis.Redis, tenant: str, database_url: str,
) -> None:  # fmt: skip
    sessions = ["alpha", "beta"]
    messages: dict[str, list[str]] = {s: [] for s in sessions}
    for session in sessions:
        store.create_session(tenant, session)
    worker = start_amqp_worker(OM_TEST_PROVIDER_DELAY_S="0.1")
    publish = publisher(amqp_app)
    for rnd in range(2):
        for session in sessions:
            messages[session] += add_chat(store, tenant, session, 3, start=3 * rnd)
            job = enqueue_flush(store, client, tenant, session, app=amqp_app).job_id
            publish(tenant, session, job)  # a duplicate delivery races for the lock
        for session in sessions:
            wait_for(partial(settled, database_url, session), 30, f"{session} settled")
    for session in sessions:
        wait_for(
            partial(fully_observed, store, tenant, session, messages[session]),
            30,
            f"session {session} fully observed",
            partial(runs_of, database_url, session),
        )
        started = [r for r in runs_of(database_url, session) if r.started_at is not None]
        assert started and all(r.state == "succeeded" for r in started), started
        assert_observed_once(store, tenant, session, messages[session])
    # A duplicate retried past a busy lock may still be on its way back: wait for none left.
    wait_for(lambda: queue_facts(amqp_url, QUEUE).messages == 0, 30, "an empty queue")
    facts = queue_facts(amqp_url, QUEUE)
    assert (facts.type, facts.durable) == ("quorum", True), facts
    # Redis served locks and coalescing only: no Celery queue or unacked index in it.
    assert not client.exists(QUEUE, "unacked", "unacked_index")
    assert "Global QoS is disabled" in worker.log.read_text(errors="replace")
    with amqp_app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=3)
        assert connection.connection.confirm_publish is True  # publisher confirms on


@needs_rabbitmq
def test_worker_killed_mid_flush_is_served_again_at_once(
    amqp_url: str, amqp_app: Any, start_amqp_worker: StartWorker, store: SqlStore,
    client: redis.Redis, tenant: str, database_url: str, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    store.create_session(tenant, "crash")
    messages = add_chat(store, tenant, "crash", 200)  # 400 messages: four observer chunks
    # A visibility timeout far beyond the bound: RabbitMQ must not wait for any timeout; the
    # default lock TTL (60 s), so neither may it wait for the dead worker's lock to expire. The
    # victim's provider is slow enough (1 s a provider call) for the rescuer to start meanwhile.
    slow = {"OM_VISIBILITY_TIMEOUT_S": "600", "OM_LOCK_TTL_S": str(Settings().locks.ttl_s)}
    victim = start_amqp_worker(OM_TEST_PROVIDER_DELAY_S="1.0", **slow)
    job = enqueue_flush(store, client, tenant, "crash", app=amqp_app).job_id
    wait_for(lambda: store.get_job(tenant, job).state == "running", 30, "the first attempt")
    # Idle and consuming before the crash, as the other workers of a deployment are.
    rescuer = start_amqp_worker(OM_TEST_PROVIDER_DELAY_S="0.1", **slow)
    wait_for(lambda: bool(covered_sources(store, tenant, "crash")), 30, "the first chunk")
    victim.kill()
    killed_at = time.monotonic()
    partial = covered_sources(store, tenant, "crash")
    assert 0 < len(set(partial)) < len(messages), "the kill did not land mid-flush"

    # Two paths serve the session again, whichever comes first: RabbitMQ redelivers the
    # message at once (it waits at the dead worker's lock until that worker's liveness key is
    # gone), and the lost-run watch fails the job once the liveness key is gone and requests
    # the session again.
    def served_again() -> bool:
        return any(
            run.attempts >= 2 or (run.id != job and run.started_at is not None)
            for run in runs_of(database_url, "crash")
        )

    wait_for(
        served_again,
        SERVED_AGAIN_BOUND_S,
        "the session to be served again",
        lambda: (runs_of(database_url, "crash"), rescuer.tail()),
    )
    served_again_s = time.monotonic() - killed_at
    wait_for(
        lambda: settled(database_url, "crash"),
        SERVED_AGAIN_BOUND_S,
        "the session's jobs to finish",
        rescuer.tail,
    )
    finished_s = time.monotonic() - killed_at
    runs = runs_of(database_url, "crash")
    assert runs[-1].state == "succeeded", runs
    assert_observed_once(store, tenant, "crash", messages)
    assert queue_facts(amqp_url, QUEUE).messages == 0
    redelivered = store.get_job(tenant, job).attempts >= 2
    by = "the redelivered message" if redelivered else "the lost-run watch"
    with capsys.disabled():
        print(
            f"\nRabbitMQ: SIGKILL -> session served again by another worker in "
            f"{served_again_s:.2f} s (goal <= 10 s), its jobs finished {finished_s:.2f} s after "
            f"the kill; served by {by}"
        )
