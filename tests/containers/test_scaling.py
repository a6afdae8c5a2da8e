"""Scaling the worker containers from one to three drains a backlog of flushes faster.

Each worker container has ``OM_WORKER_CONCURRENCY`` slots and every flush makes one provider
call of a fixed delay, so the ceiling is workers x slots / delay flushes per second; the fair
queue admits only as many jobs as the live workers advertise slots, so added containers take
work as soon as they advertise. The backlog: one conversation turn appended to each of
:data:`BACKLOG` fresh sessions, then a flush requested for every one as fast as the API takes
them; throughput is flushes over the time from the first request to the last job finished.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Final

import redis

from om_api.client import OMClient
from om_api.schemas import MessageWire
from om_workers.coordination import keys
from om_workers.store import SqlStore
from tests.containers.stack import ComposeStack
from tests.e2e.workers import FINAL

BACKLOG: Final = 24
DRAIN_TIMEOUT_S: Final = 180.0
ADVERTISE_TIMEOUT_S: Final = 30.0


def _live_workers(stack: ComposeStack) -> int:
    """Worker processes the fair queue counts (advertisements not yet expired, on Redis's
    clock, as the dispatch script reads them)."""
    client = redis.Redis.from_url(stack.redis_url)
    try:
        seconds, micros = client.time()
        now_ms = seconds * 1000 + micros // 1000
        return int(client.zcount(keys.POOL, now_ms, "+inf"))
    finally:
        client.close()


def _wait_for_pool(stack: ComposeStack, workers: int) -> None:
    deadline = time.monotonic() + ADVERTISE_TIMEOUT_S
    while _live_workers(stack) != workers:
        assert time.monotonic() < deadline, f"{_live_workers(stack)} workers advertise slots"
        time.sleep(0.5)


def _drain(stack: ComposeStack, workers: int) -> dict[str, float]:
    stack.scale_workers(workers)
    assert len(stack.workers()) == workers
    _wait_for_pool(stack, workers)
    tenant = "tenant-a"
    store = SqlStore.from_url(stack.database_url)
    try:
        with OMClient(stack.api_url, stack.keys[tenant]) as om:
            label = uuid.uuid4().hex[:6]
            sessions = [om.create_session(f"scale{workers}-{label}-{i}").id for i in range(BACKLOG)]
            for i, session in enumerate(sessions):
                turn = [
                    MessageWire(role="user", content=f"Deploy build {i} to staging, please."),
                    MessageWire(role="assistant", content=f"Build {i} is live on staging."),
                ]
                om.append(session, turn)
            began = time.monotonic()
            jobs = [om.flush(session).job_id for session in sessions]
            deadline = began + DRAIN_TIMEOUT_S
            waiting = set(jobs)
            while waiting:
                assert time.monotonic() < deadline, f"{len(waiting)} flushes still not finished"
                states = {j: store.get_job(tenant, j).state for j in waiting}
                failed = {j: s for j, s in states.items() if s in FINAL - {"succeeded"}}
                assert not failed, failed
                waiting -= {j for j, state in states.items() if state == "succeeded"}
                time.sleep(0.1)
            took = time.monotonic() - began
    finally:
        store.close()
    return {"workers": workers, "flushes": BACKLOG, "seconds": round(took, 1),
            "per_s": round(BACKLOG / took, 2)}  # fmt: skip


def test_three_worker_containers_drain_a_backlog_faster_than_one(
    stack: ComposeStack, figures: dict[str, Any]
) -> None:
    one = _drain(stack, 1)
    three = _drain(stack, 3)
    tuning = stack.tuning
    figures["scaling"] = {
        "slots_per_worker": tuning.worker_concurrency,
        "provider_delay_s": tuning.provider_delay_s,
        "one": one,
        "three": three,
    }
    ceiling_one = tuning.worker_concurrency / tuning.provider_delay_s
    assert one["per_s"] <= ceiling_one * 1.1, one  # one worker cannot beat its slots
    assert three["per_s"] >= 1.8 * one["per_s"], (one, three)
