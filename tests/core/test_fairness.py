"""The fair queue's rule, step by step, on the pure model (om_core.policy.fairness)."""

from __future__ import annotations

import math

import pytest

from om_core.policy.fairness import (
    NEVER_SERVED,
    OTHER_TENANTS,
    FairQueueModel,
    QueuedJob,
    TenantLoad,
    top_tenants,
    used_after_admission,
)

HALF_LIFE_MS = 60_000


def job(tenant: str, n: int) -> QueuedJob:
    return QueuedJob(tenant, f"{tenant}-s{n}", f"{tenant}-j{n}")


def add_all(
    model: FairQueueModel, jobs: list[QueuedJob], capacity: int, now_ms: int = 0
) -> tuple[FairQueueModel, list[str]]:
    admitted: list[str] = []
    for queued in jobs:
        model, _, now = model.add(queued, capacity, now_ms)
        admitted += [j.job_id for j in now]
    return model, admitted


def finish(
    model: FairQueueModel, job_ids: list[str], capacity: int, now_ms: int = 0
) -> tuple[FairQueueModel, list[str]]:
    admitted: list[str] = []
    for job_id in job_ids:
        model, now = model.done(job_id, capacity, now_ms)
        admitted += [j.job_id for j in now]
    return model, admitted


def test_a_lone_tenant_fills_every_slot_and_waits_beyond() -> None:
    model, admitted = add_all(FairQueueModel(), [job("a", i) for i in range(5)], capacity=3)
    assert admitted == ["a-j0", "a-j1", "a-j2"]
    assert model.waiting == {"a": ("a-j3", "a-j4")}
    model, now = finish(model, ["a-j1"], capacity=3)
    assert now == ["a-j3"]


def test_a_tenant_behind_a_backlog_gets_every_free_slot_until_its_usage_catches_up() -> None:
    model, _ = add_all(FairQueueModel(), [job("a", i) for i in range(100)], capacity=4)
    model, admitted = add_all(model, [job("b", i) for i in range(5)], capacity=4)
    assert admitted == []  # every slot is busy with a's jobs
    # b was never served, a four times: b takes each slot that frees.
    model, order = finish(model, ["a-j0", "a-j1", "a-j2", "a-j3"], capacity=4)
    assert order == ["b-j0", "b-j1", "b-j2", "b-j3"]
    model, order = finish(model, ["b-j0", "b-j1", "b-j2"], capacity=4)
    # Four admissions each: a tie, which goes by id; then b is behind again.
    assert order == ["a-j4", "b-j4", "a-j5"]


def test_two_busy_tenants_alternate() -> None:
    model, _ = add_all(
        FairQueueModel(), [job(t, i) for i in range(6) for t in ("a", "b")], capacity=1
    )
    order = ["a-j0"]
    for _ in range(5):
        model, now = model.done(order[-1], 1, 0)
        order.append(now[0].job_id)
    assert order == ["a-j0", "b-j0", "a-j1", "b-j1", "a-j2", "b-j2"]


def test_usage_fades_so_a_past_heavy_tenant_is_not_held_back_forever() -> None:
    # a was served 10 times at t=0, b twice a half-life later: a's usage has halved to 5.
    a = b = NEVER_SERVED
    for _ in range(10):
        a = used_after_admission(a, 0, HALF_LIFE_MS)
    for _ in range(2):
        b = used_after_admission(b, HALF_LIFE_MS, HALF_LIFE_MS)
    assert b < a
    # Ten half-lives on, both are nearly forgotten; a's 10 weigh about as much as b's 2 did.
    later = 11 * HALF_LIFE_MS
    assert 2.0 ** (a - later / HALF_LIFE_MS) == pytest.approx(10 / 2**11)
    assert used_after_admission(NEVER_SERVED, later, HALF_LIFE_MS) == later / HALF_LIFE_MS


@pytest.mark.parametrize(
    ("admissions", "elapsed_half_lives", "usage"),
    [(1, 0, 1.0), (2, 0, 2.0), (4, 0, 4.0), (1, 1, 0.5), (3, 2, 0.75), (8, 3, 1.0)],
)
def test_usage_is_admissions_halved_every_half_life(
    admissions: int, elapsed_half_lives: int, usage: float
) -> None:
    used = NEVER_SERVED
    for _ in range(admissions):
        used = used_after_admission(used, 0, HALF_LIFE_MS)
    now = elapsed_half_lives * HALF_LIFE_MS
    assert 2.0 ** (used - now / HALF_LIFE_MS) == pytest.approx(usage)


def test_long_forgotten_usage_goes_first_again_and_ties_go_by_id() -> None:
    model, _ = add_all(FairQueueModel(), [job("b", 0), job("b", 1)], capacity=1)
    assert model.usage["b"] == 0.0
    far = 30 * HALF_LIFE_MS  # past the forgetting floor
    model, _ = add_all(model, [job("a", 0)], capacity=1, now_ms=far)
    model, now = model.done("b-j0", 1, far)
    assert "b" not in model.usage or model.usage["b"] == far / HALF_LIFE_MS
    assert [j.job_id for j in now] == ["a-j0"]  # a and b both never served (b forgotten): a < b


def test_add_reports_a_job_in_flight_as_a_duplicate_and_keeps_a_waiting_one_in_place() -> None:
    model, _ = add_all(FairQueueModel(), [job("a", 0), job("a", 1), job("a", 2)], capacity=1)
    model, duplicate, now = model.add(job("a", 0), 1, 0)
    assert duplicate and now == []
    model, duplicate, now = model.add(job("a", 1), 1, 0)
    assert not duplicate and model.waiting["a"] == ("a-j1", "a-j2")


def test_start_and_done_of_unknown_or_waiting_jobs_change_nothing() -> None:
    model, _ = add_all(FairQueueModel(), [job("a", 0), job("a", 1)], capacity=1)
    assert model.start("nope") == model
    assert model.start("a-j1") == model  # waiting, e.g. a stale duplicate message
    assert model.done("a-j1", 1, 0) == (model, [])
    running = model.start("a-j0")
    assert running.states["a-j0"] == "running"
    after, now = running.done("a-j0", 1, 0)
    assert [j.job_id for j in now] == ["a-j1"] and "a-j0" not in after.states


def test_a_refused_job_goes_back_to_the_head_of_its_line() -> None:
    model, _ = add_all(FairQueueModel(), [job("a", i) for i in range(3)], capacity=1)
    model = model.give_back("a-j0")
    assert model.waiting["a"] == ("a-j0", "a-j1", "a-j2")
    assert model.in_flight() == 0
    assert model.give_back("a-j1") == model  # not admitted: nothing to give back


def test_capacity_is_at_least_one_and_the_half_life_at_least_a_millisecond() -> None:
    _, admitted = add_all(FairQueueModel(), [job("a", 0)], capacity=0)
    assert admitted == ["a-j0"]
    with pytest.raises(ValueError):
        used_after_admission(0.0, 0, 0)
    assert math.isinf(NEVER_SERVED) and NEVER_SERVED < 0


def test_top_tenants_bounds_the_label_values() -> None:
    loads = [TenantLoad(f"t{i}", waiting=i) for i in range(5)] + [TenantLoad("x", throttled=9)]
    top = top_tenants(loads, 2)
    assert [t.tenant_id for t in top] == ["t4", "t3", OTHER_TENANTS]
    assert top[-1].waiting == 0 + 1 + 2 and top[-1].throttled == 9
    assert top_tenants(loads[:2], 5) == sorted(loads[:2], key=lambda t: -t.jobs)
    with pytest.raises(ValueError):
        top_tenants(loads, 0)
