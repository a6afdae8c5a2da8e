"""The fair queue in a real Redis: the Lua script makes the pure model's choices, keeps its
backlog count exact, and reports each tenant's load."""

from __future__ import annotations

import time

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from om_core.policy.fairness import FairQueueModel, QueuedJob, TenantLoad
from om_workers.coordination import keys
from om_workers.coordination.fairness import FairPublisher, FairQueue, send_admitted
from om_workers.coordination.pool import advertise

TENANTS = ("a", "b", "c:d")  # ':' is escaped in key names
HALF_LIFE_MS = 1_000
Op = tuple[str, int, int, int]
ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "start", "done", "done", "give_back"]),
        st.integers(0, len(TENANTS) - 1),
        st.integers(0, 5),
        st.sampled_from([0, 0, 1, 250, 999, 25_000]),  # ms before the step; 25 s: forgotten
    ),
    max_size=60,
)


def queued(tenant: int, n: int) -> QueuedJob:
    name = TENANTS[tenant]
    return QueuedJob(name, f"s{n}", f"{name}/j{n}")


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=ops, capacity=st.integers(1, 4))
def test_the_script_admits_what_the_model_admits(
    client: redis.Redis, steps: list[Op], capacity: int
) -> None:
    client.flushdb()
    now = [1_700_000_000_000]  # ms; the script is handed the model's clock
    queue = FairQueue(
        client, capacity=capacity, half_life_s=HALF_LIFE_MS / 1000, clock=lambda: now[0]
    )
    model = FairQueueModel(half_life_ms=HALF_LIFE_MS)
    for op, tenant, n, wait_ms in steps:
        now[0] += wait_ms
        job = queued(tenant, n)
        if op == "add":
            model, duplicate, expected = model.add(job, capacity, now[0])
            assert queue.add(job.tenant_id, job.session_id, job.job_id) == (duplicate, expected)
        elif op == "start":
            model = model.start(job.job_id)
            queue.start(job.job_id)
        elif op == "done":
            model, expected = model.done(job.job_id, capacity, now[0])
            assert queue.done(job.job_id) == expected
        else:
            model = model.give_back(job.job_id)
            queue.give_back(job)
        assert client.llen(keys.BACKLOG) == client.hlen(keys.FAIR_JOBS) == len(model.states)
    backlog, found = queue.load()
    assert backlog == len(model.states)
    loads = {load.tenant_id: load for load in found}
    for tenant in TENANTS:
        states = [s for j, s in model.states.items() if model.jobs[j].tenant_id == tenant]
        load = loads.get(tenant, TenantLoad(tenant))
        assert (load.waiting, load.queued, load.running) == (
            states.count("waiting"),
            states.count("admitted"),
            states.count("running"),
        )


def test_an_idle_queue_leaves_no_keys_behind(client: redis.Redis) -> None:
    queue = FairQueue(client, capacity=2)
    for n in range(3):
        queue.add("t", f"s{n}", f"j{n}")
    for n in range(3):
        queue.start(f"j{n}")
        queue.done(f"j{n}")
    left = set(client.scan_iter(match="om:*"))
    assert left <= {keys.FAIR_USAGE}, left  # only the tenant's usage, which fades


def _expire_advertisement(client: redis.Redis, worker_id: str) -> None:
    """What the TTL does to a worker that stopped refreshing, without waiting for it: its
    expiry (Redis milliseconds in the pool) moves to the past."""
    assert client.zadd(keys.POOL, {worker_id: 1}, xx=True, ch=True) == 1


def test_capacity_follows_the_live_pool(client: redis.Redis) -> None:
    queue = FairQueue(client)  # capacity 0: the pool's slots
    _, admitted = queue.add("t", "s0", "j0")
    assert len(admitted) == 1  # no worker advertised: one at a time, never none
    for n in range(1, 6):
        queue.add("t", f"s{n}", f"j{n}")
    assert advertise(client, "w1", 3) == 3
    assert [j.job_id for j in queue.fill()] == ["j1", "j2"]
    assert advertise(client, "w2", 2) == 5
    assert [j.job_id for j in queue.fill()] == ["j3", "j4"]
    _expire_advertisement(client, "w2")
    assert queue.done("j0") == []  # 4 in flight, 3 slots: nothing admitted
    assert advertise(client, "w1", 0) == 0  # a stopping worker withdraws its slots


def test_sweep_forgets_jobs_whose_message_was_lost(client: redis.Redis) -> None:
    queue = FairQueue(client, capacity=1)
    queue.add("t", "s0", "j0")
    queue.add("t", "s1", "j1")
    assert queue.sweep(older_than_s=3600) == []
    time.sleep(0.02)
    assert [j.job_id for j in queue.sweep(older_than_s=0.01)] == ["j1"]
    assert queue.load()[0] == 1


def test_a_refused_publish_gives_the_job_back_and_raises(client: redis.Redis) -> None:
    queue = FairQueue(client, capacity=2)
    _, admitted = queue.add("t", "s0", "j0")
    sent: list[str] = []

    def broken(tenant: str, session: str, job: str) -> None:
        raise ConnectionError("broker down")

    try:
        send_admitted(admitted, broken, queue)
    except ConnectionError:
        pass
    else:
        raise AssertionError("the broker's error must propagate")
    assert queue.load() == (1, [TenantLoad("t", waiting=1)])
    send_admitted(queue.fill(), lambda t, s, j: sent.append(j), queue)
    assert sent == ["j0"]


def test_a_dead_workers_running_jobs_free_their_places(client: redis.Redis) -> None:
    queue = FairQueue(client)
    advertise(client, "alive", 1)
    advertise(client, "doomed", 2)
    for n in range(5):
        queue.add("t", f"s{n}", f"j{n}")
    queue.start("j0", "alive")
    queue.start("j1", "doomed")
    queue.start("j2", "doomed")
    _expire_advertisement(client, "doomed")  # it was killed: no refresh came
    # The next step frees the dead worker's two places; one slot is left, held by j0.
    assert queue.fill() == []
    assert queue.load() == (3, [TenantLoad("t", waiting=2, running=1)])
    assert [j.job_id for j in queue.done("j0")] == ["j3"]


def test_a_queue_refuses_a_negative_capacity_and_a_half_life_under_a_millisecond(
    client: redis.Redis,
) -> None:
    FairQueue(client, capacity=0, half_life_s=0.001)  # the smallest of each is accepted
    with pytest.raises(ValueError, match="capacity"):
        FairQueue(client, capacity=-1)
    with pytest.raises(ValueError, match="half_life_s"):
        FairQueue(client, half_life_s=0.0009)


def test_a_killed_prefork_childs_place_is_reaped_while_its_parent_lives(
    client: redis.Redis,
) -> None:
    queue = FairQueue(client)
    advertise(client, "parent", 2)  # the parent advertises; its children run the jobs
    for n in range(3):
        queue.add("t", f"s{n}", f"j{n}")
    queue.start("j0", "child-a", liveness_ttl_s=30)
    queue.start("j1", "parent", liveness_ttl_s=30)
    assert 0 < client.pttl(keys.worker_key("child-a")) <= 30_000  # known alive from its start
    assert not client.exists(keys.worker_key("parent"))  # in the pool: its advert says enough
    assert queue.reap() == []  # every process alive: nothing freed, no room
    client.delete(keys.worker_key("child-a"))  # killed: its heartbeat stopped, the key expired
    assert [j.job_id for j in queue.reap()] == ["j2"]  # j0's place went to the next job
    assert queue.load() == (2, [TenantLoad("t", queued=1, running=1)])
    assert [j.job_id for j in queue.done("j1")] == []


def test_jobs_admitted_when_a_worker_died_are_sent_again_once(client: redis.Redis) -> None:
    sent: list[str] = []
    fair = FairPublisher(FairQueue(client), lambda t, s, j: sent.append(j))
    advertise(client, "alive", 1)
    advertise(client, "doomed", 2)
    for n in range(3):
        fair("t", f"s{n}", f"j{n}")
    assert sent == ["j0", "j1", "j2"]  # three slots: all admitted
    fair.started("j0", "alive")  # j1 and j2 sit unstarted: the doomed worker took them
    fair.reap()
    assert sent == ["j0", "j1", "j2"]  # nobody died: nothing sent again
    _expire_advertisement(client, "doomed")
    fair.reap()
    assert sent[3:] == ["j1", "j2"]  # their messages may have died with it
    fair.reap()
    assert sent[5:] == []  # once per departure
