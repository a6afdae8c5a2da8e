"""The local fault matrix's two state faults, on the containers: a worker container killed
mid-flush (its init process SIGKILLed from the host, as the OOM killer does; podman's restart
policy brings it back) and the Redis container restarted empty (stopped, its data volume
wiped, started again). Each heals by itself with nothing lost (:mod:`tests.containers.faults`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Final

import pytest

from tests.containers.faults import FaultHarness
from tests.containers.stack import ComposeStack

REDIS_DOWN_S: Final = 1.0
AFTER_S: Final = 3.0
"""How long the load goes on after the fault, before it stops and the system heals alone."""


@pytest.fixture(scope="module")
def harness(stack: ComposeStack) -> Iterator[FaultHarness]:
    yield FaultHarness(stack)


def test_a_worker_container_killed_mid_flush_heals_with_nothing_lost(
    stack: ComposeStack, harness: FaultHarness, figures: dict[str, Any]
) -> None:
    began = time.time()
    with harness.load("worker-kill") as load:
        name, in_flight = harness.busy_worker(timeout_s=30)
        assert in_flight > 0, "no flush in flight to kill"
        restarts = stack.restart_count(name)
        killed_at = stack.crash(name)
        end = time.time()
        time.sleep(AFTER_S)  # the load goes on through the crash
    # Podman's restart policy brings the container back (a crash, not a stop).
    stack.wait_healthy([name])
    assert stack.restart_count(name) == restarts + 1
    outcome = harness.judge(
        f"SIGKILL of {name}'s init with {in_flight} flush(es) in flight",
        load.sessions,
        end,
        began,
        kills=[killed_at],
    )
    # The matrix's target on the Redis broker, reported as it does (not a failure): the lock
    # TTL plus one reconcile interval; the reconciler sweeps the dead worker's job sooner, once
    # its liveness key (5 s) is gone.
    target = stack.tuning.lock_ttl_s + stack.tuning.reconcile_interval_s
    figures["worker_kill"] = {
        **outcome.summary(),
        "in_flight": in_flight,
        "target_s": target,
        "target_met": outcome.heal_s is not None and outcome.heal_s <= target,
    }
    assert not outcome.failures(), outcome.failures()


def test_the_redis_container_restarted_empty_heals_with_nothing_lost(
    stack: ComposeStack, harness: FaultHarness, figures: dict[str, Any]
) -> None:
    began = time.time()
    with harness.load("redis-restart") as load:
        start = time.time()
        down_s = stack.restart_redis_empty(REDIS_DOWN_S)
        end = time.time()
        time.sleep(AFTER_S)  # agents go on once Redis answers again
    outcome = harness.judge(
        f"Redis stopped, its volume emptied, started again ({down_s:.1f} s down)",
        load.sessions,
        end,
        began,
        windows=[(start, end)],
    )
    figures["redis_restart"] = {**outcome.summary(), "down_s": round(down_s, 1)}
    assert not outcome.failures(), outcome.failures()
    # Every om service is healthy again without a restart by hand.
    stack.wait_healthy(stack.om_containers(), timeout_s=60)
