"""The worker's event loop wakes at least every second, so a warm shutdown (SIGTERM) begins
within a second on RabbitMQ too, where kombu's hub would otherwise sleep until its next timer
(up to 10 s) while idle. Checked on a real kombu hub: the delay the loop would sleep."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kombu.asynchronous import Hub
from kombu.asynchronous.timer import Timer

from om_workers.celery.app import get_app
from om_workers.celery.wakeup import WAKE_INTERVAL_S, WakeForShutdown
from om_workers.config import get_settings

LONGEST_SLEEP_S = 10.0
"""What Celery gives its event loop's timer (``celery.worker.components.Timer``)."""


def test_the_loop_of_a_running_consumer_sleeps_at_most_the_wake_interval() -> None:
    hub = Hub(timer=Timer(max_interval=LONGEST_SLEEP_S))  # as Celery builds it
    try:
        hub.call_later(30, lambda: None)  # a far timer: an idle consumer's next one
        assert hub.fire_timers() == LONGEST_SLEEP_S
        consumer = SimpleNamespace(hub=hub)
        step = WakeForShutdown(consumer)
        step.start(consumer)
        step.start(consumer)  # a consumer restarted without a stop keeps one timer
        assert len(hub.timer.queue) == 2  # the far timer and the step's
        assert 0 < hub.fire_timers() <= WAKE_INTERVAL_S
        entry = step.entry
        step.stop(consumer)
        assert entry.canceled and step.entry is None
    finally:
        hub.close()


def test_a_consumer_without_an_event_loop_gets_no_timer() -> None:
    consumer = SimpleNamespace(hub=None)
    step = WakeForShutdown(consumer)
    step.start(consumer)
    step.stop(consumer)
    assert step.entry is None


def test_the_worker_app_runs_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OM_REDIS_URL", "redis://127.0.0.1:1/0")  # built, never connected
    get_settings.cache_clear()
    get_app.cache_clear()
    try:
        assert WakeForShutdown in get_app().steps["consumer"]
    finally:
        get_app.cache_clear()
        get_settings.cache_clear()
