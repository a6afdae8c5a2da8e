"""The fair queue's rule, step by step, on the pure model (om_core.fairness)."""

from __future__ import annotations

import pytest

from om_core.fairness import (
    OTHER_TENANTS,
    FairQueueModel,
    QueuedJob,
    TenantLoad,
    top_tenants,
)


def job(tenant: str, n: int) -> QueuedJob:
    return QueuedJob(tenant, f"{tenant}-s{n}", f"{tenant}-j{n}")


def add_all(
    model: FairQueueModel, jobs: list[QueuedJob], capacity: int
) -> tuple[FairQueueModel, list[str]]:
    admitted: list[str] = []
    for queued in jobs:
        model, _, now = model.add(queued, capacity)
        admitted += [j.job_id for j in now]
    return model, admitted


def test_a_lone_tenant_fills_every_slot_and_waits_beyond() -> None:
    model, admitted = add_all(FairQueueModel(), [job("a", i) for i in range(5)], capacity=3)
    assert admitted == ["a-j0", "a-j1", "a-j2"]
    assert model.waiting == {"a": ("a-j3", "a-j4")}
    model, now = model.done("a-j1", capacity=3)
    assert [j.job_id for j in now] == ["a-j3"]


def test_a_tenant_behind_a_backlog_gets_the_next_free_slots_until_shares_are_equal() -> None:
    model, _ = add_all(FairQueueModel(), [job("a", i) for i in range(100)], capacity=4)
    model, admitted = add_all(model, [job("b", i) for i in range(3)], capacity=4)
    assert admitted == []  # every slot is busy with a's jobs
    order = []
    for finished in ("a-j0", "a-j1", "a-j2", "a-j3"):
        model, now = model.done(finished, capacity=4)
        order += [j.job_id for j in now]
    # b takes the freed slots until both tenants hold two, then each keeps its share.
    assert order == ["b-j0", "b-j1", "a-j4", "a-j5"]
    model, now = model.done("b-j0", capacity=4)
    assert [j.job_id for j in now] == ["b-j2"]


@pytest.mark.parametrize(
    ("in_flight", "served", "expected"),
    [
        ({"a": 2, "b": 1}, {"a": 1, "b": 2}, "b"),  # fewer in flight wins
        ({"a": 1, "b": 1}, {"a": 5, "b": 3}, "b"),  # then served least recently
        ({"a": 1, "b": 1}, {"a": 5}, "b"),  # an idle tenant (never served) first
        ({"a": 0, "b": 0}, {}, "a"),  # then by id
    ],
)
def test_next_tenant(in_flight: dict[str, int], served: dict[str, int], expected: str) -> None:
    jobs, states = {}, {}
    for tenant, count in in_flight.items():
        for n in range(count):
            queued = job(tenant, 100 + n)
            jobs[queued.job_id] = queued
            states[queued.job_id] = "running"
    waiting = {}
    for tenant in in_flight:
        queued = job(tenant, 0)
        jobs[queued.job_id] = queued
        states[queued.job_id] = "waiting"
        waiting[tenant] = (queued.job_id,)
    model = FairQueueModel(jobs=jobs, states=states, waiting=waiting, served=served)  # type: ignore[arg-type]
    assert model.next_tenant() == expected


def test_round_robin_among_equals_with_one_slot() -> None:
    model, _ = add_all(
        FairQueueModel(), [job(t, i) for i in range(3) for t in ("a", "b", "c")], capacity=1
    )
    order = ["a-j0"]
    for _ in range(5):
        model, now = model.done(order[-1], capacity=1)
        order.append(now[0].job_id)
    assert order == ["a-j0", "b-j0", "c-j0", "a-j1", "b-j1", "c-j1"]


def test_add_reports_a_job_in_flight_as_a_duplicate_and_keeps_a_waiting_one_in_place() -> None:
    model, _ = add_all(FairQueueModel(), [job("a", 0), job("a", 1), job("a", 2)], capacity=1)
    model, duplicate, now = model.add(job("a", 0), capacity=1)
    assert duplicate and now == []
    model, duplicate, now = model.add(job("a", 1), capacity=1)
    assert not duplicate and model.waiting["a"] == ("a-j1", "a-j2")


def test_start_and_done_of_unknown_or_waiting_jobs_change_nothing() -> None:
    model, _ = add_all(FairQueueModel(), [job("a", 0), job("a", 1)], capacity=1)
    assert model.start("nope") == model
    assert model.start("a-j1") == model  # waiting, e.g. a stale duplicate message
    assert model.done("a-j1", capacity=1) == (model, [])
    running = model.start("a-j0")
    assert running.states["a-j0"] == "running"
    after, now = running.done("a-j0", capacity=1)
    assert [j.job_id for j in now] == ["a-j1"] and "a-j0" not in after.states


def test_a_refused_job_goes_back_to_the_head_of_its_line() -> None:
    model, _ = add_all(FairQueueModel(), [job("a", i) for i in range(3)], capacity=1)
    model = model.give_back("a-j0")
    assert model.waiting["a"] == ("a-j0", "a-j1", "a-j2")
    assert model.in_flight() == 0
    assert model.give_back("a-j1") == model  # not admitted: nothing to give back


def test_capacity_is_at_least_one() -> None:
    _, admitted = add_all(FairQueueModel(), [job("a", 0)], capacity=0)
    assert admitted == ["a-j0"]


def test_top_tenants_bounds_the_label_values() -> None:
    loads = [TenantLoad(f"t{i}", waiting=i) for i in range(5)] + [TenantLoad("x", throttled=9)]
    top = top_tenants(loads, 2)
    assert [t.tenant_id for t in top] == ["t4", "t3", OTHER_TENANTS]
    assert top[-1].waiting == 0 + 1 + 2 and top[-1].throttled == 9
    assert top_tenants(loads[:2], 5) == sorted(loads[:2], key=lambda t: -t.jobs)
    with pytest.raises(ValueError):
        top_tenants(loads, 0)
