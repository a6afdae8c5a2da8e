"""``om.reconcile``'s pass and the worker time-limit settings, without Celery workers."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from sqlalchemy import update

from om_workers.celery.limits import stuck_job_age_s, time_limits
from om_workers.config import Settings
from om_workers.coordination import keys
from om_workers.coordination.locks import SessionLock
from om_workers.errors import ConfigError
from om_workers.jobs.reconcile import ReconcileReport, reconcile_once
from om_workers.store import (
    SqlStore,
    failure_streak,
    sessions_of_jobs,
    sessions_over_unobserved,
)
from om_workers.store.schema import flush_jobs
from om_workers.store.unit_of_work import utc_now
from tests.e2e.support import add_chat

Published = list[tuple[str, str, str]]


def reconcile(
    store: SqlStore, client: redis.Redis, **options: object
) -> tuple[Published, ReconcileReport]:
    """One reconciler pass; what it published, and its report."""
    published: Published = []
    report = reconcile_once(
        store,
        client,
        lambda t, s, j: published.append((t, s, j)),
        **options,  # type: ignore[arg-type]
    )
    return published, report


def test_reconcile_republishes_stale_unlocked_markers_and_fails_stuck_runs(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    for session in ("old", "locked", "fresh"):
        store.create_session(tenant, session)
    age_100s = keys.PENDING_TTL_S - 100
    old_job = store.create_job(tenant, "old").id  # a real queued job: markers name known jobs
    client.set(keys.pending_key(tenant, "old"), old_job, ex=age_100s)
    client.set(keys.pending_key(tenant, "locked"), "job-locked", ex=age_100s)
    client.set(keys.pending_key(tenant, "fresh"), "job-fresh")
    holder = SessionLock(client, tenant, "locked")
    assert holder.acquire()
    stuck = store.create_job(tenant, "old")
    store.start_job(tenant, stuck.id)
    published, report = reconcile(store, client, stale_pending_s=10, stuck_job_s=0)
    assert published == [(tenant, "old", old_job)] and report.republished == (old_job,)
    assert report.failed_jobs == (stuck.id,)
    assert report.requested == ()  # the swept run's session coalesced onto the pending job
    assert store.get_job(tenant, stuck.id).state == "failed"
    holder.release()


def test_time_limits_overrides_must_be_complete_ordered_and_above_the_lock_ttl() -> None:
    derived = time_limits(Settings())
    assert derived.visibility_timeout_s > Settings().locks.ttl_s
    assert stuck_job_age_s(Settings()) > derived.visibility_timeout_s
    ok = Settings(
        http_timeout_s=1,
        soft_time_limit_s=2,
        hard_time_limit_s=3,
        visibility_timeout_s=4,
        lock_ttl_s=2,
    )
    assert time_limits(ok).visibility_timeout_s == 4
    with pytest.raises(ConfigError):
        time_limits(Settings(soft_time_limit_s=2))
    with pytest.raises(ConfigError):
        time_limits(
            Settings(
                http_timeout_s=1, soft_time_limit_s=3, hard_time_limit_s=2, visibility_timeout_s=4
            )
        )
    with pytest.raises(ConfigError):
        time_limits(
            Settings(
                http_timeout_s=1,
                soft_time_limit_s=2,
                hard_time_limit_s=3,
                visibility_timeout_s=4,
                lock_ttl_s=5,
            )
        )


def test_reconcile_requests_backlogged_sessions_without_marker_or_lock(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    for session in ("big", "small", "marked", "locked"):
        store.create_session(tenant, session)
        add_chat(store, tenant, session, 1 if session == "small" else 6)
    threshold = min(store.get_session(tenant, s).unobserved_tokens for s in ("big", "marked"))
    assert 0 < store.get_session(tenant, "small").unobserved_tokens < threshold
    over = sessions_over_unobserved(store, threshold, 10)
    assert {r.session_id for r in over} == {"big", "locked", "marked"}
    assert [r.unobserved_tokens for r in over] == sorted(
        (r.unobserved_tokens for r in over), reverse=True
    )
    assert len(sessions_over_unobserved(store, threshold, 1)) == 1
    marked = store.create_job(tenant, "marked").id  # queued: it will read the session
    client.set(keys.pending_key(tenant, "marked"), marked, ex=keys.PENDING_TTL_S)
    holder = SessionLock(client, tenant, "locked")
    assert holder.acquire()
    published, report = reconcile(
        store, client, stale_pending_s=1000, stuck_job_s=1000, unobserved_threshold=threshold
    )
    assert [(t, s) for t, s, _ in published] == [(tenant, "big")]
    (job,) = report.requested
    assert store.get_job(tenant, job).state == "queued"
    assert client.get(keys.pending_key(tenant, "big")) == job
    # The next pass finds the marker and requests nothing twice.
    again = reconcile_once(
        store, client, lambda *a: None, stale_pending_s=1000, stuck_job_s=1000,
        unobserved_threshold=threshold,
    )  # fmt: skip
    assert again.requested == ()
    holder.release()


def test_reconcile_re_requests_the_session_of_a_swept_run(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    store.create_session(tenant, "crashed")
    stuck = store.create_job(tenant, "crashed")
    store.start_job(tenant, stuck.id)
    published, report = reconcile(store, client, stale_pending_s=1000, stuck_job_s=0)
    assert report.failed_jobs == (stuck.id,)
    (job,) = report.requested
    assert job != stuck.id and published == [(tenant, "crashed", job)]
    assert sessions_of_jobs(store, [stuck.id, "unknown"])[0].session_id == "crashed"


def test_reconcile_republishes_queued_runs_whose_message_was_lost(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    store.create_session(tenant, "lost")
    first = store.create_job(tenant, "lost")  # queued; Redis lost its marker and message
    second = store.create_job(tenant, "lost")
    published, report = reconcile(store, client, stale_pending_s=0, stuck_job_s=1000)
    # The oldest gets the fresh marker and is published; the newer one is served by it.
    assert report.republished == (first.id,) and published == [(tenant, "lost", first.id)]
    assert client.get(keys.pending_key(tenant, "lost")) == first.id
    run = store.get_job(tenant, second.id)
    assert run.state == "skipped" and run.error is not None and first.id in run.error


def test_a_backlogged_session_whose_runs_keep_failing_is_backed_off(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    store.create_session(tenant, "broken")
    add_chat(store, tenant, "broken", 6)
    threshold = store.get_session(tenant, "broken").unobserved_tokens

    def fail_runs(count: int) -> None:
        for _ in range(count):
            run = store.create_job(tenant, "broken")
            store.start_job(tenant, run.id)
            store.finish_job(tenant, run.id, "failed", error="provider down")

    def backlog_pass() -> tuple[Published, ReconcileReport]:
        return reconcile(
            store, client, stale_pending_s=1000, stuck_job_s=1000, unobserved_threshold=threshold
        )

    fail_runs(2)  # below the streak that backs off: still requested
    published, _ = backlog_pass()
    assert [s for _, s, _ in published] == ["broken"]
    client.delete(keys.pending_key(tenant, "broken"))
    (queued,) = [j for _, _, j in published]
    store.start_job(tenant, queued)
    store.finish_job(tenant, queued, "failed", error="provider down")
    assert failure_streak(store, tenant, "broken").failures == 3
    published, report = backlog_pass()
    assert published == [] and report.backed_off == ("broken",)
    # A success ends the streak.
    ok = store.create_job(tenant, "broken")
    store.start_job(tenant, ok.id)
    store.finish_job(tenant, ok.id, "succeeded")
    assert failure_streak(store, tenant, "broken").failures == 0


def test_requests_the_broker_refused_never_back_a_session_off(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    # A broker outage fails every flush request at publish time; when the broker returns, the
    # session must be requested again at the next pass, not backed off for its "failures".
    store.create_session(tenant, "s")
    add_chat(store, tenant, "s", 4)
    threshold = store.get_session(tenant, "s").unobserved_tokens
    for _ in range(5):
        refused = store.create_job(tenant, "s")
        store.finish_job(tenant, refused.id, "failed", error="not published: connection refused")
    assert failure_streak(store, tenant, "s").failures == 0
    published, report = reconcile(
        store, client, stale_pending_s=1000, stuck_job_s=1000, unobserved_threshold=threshold
    )
    assert [s for _, s, _ in published] == ["s"] and report.backed_off == ()


def test_a_marker_naming_a_finished_job_does_not_hold_a_backlogged_session_back(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    # A request whose publish failed while Redis and the broker were out: its row is failed,
    # and its marker could not be dropped. The session is requested again at the next pass,
    # not once the marker counts as stale.
    store.create_session(tenant, "s")
    add_chat(store, tenant, "s", 4)
    threshold = store.get_session(tenant, "s").unobserved_tokens
    refused = store.create_job(tenant, "s").id
    store.finish_job(tenant, refused, "failed", error="not published: connection refused")
    client.set(keys.pending_key(tenant, "s"), refused)
    published, report = reconcile(
        store, client, stale_pending_s=3600, stuck_job_s=3600, unobserved_threshold=threshold
    )
    ((_, session, job),) = published
    assert session == "s" and job != refused and report.requested == (job,)
    assert client.get(keys.pending_key(tenant, "s")) == job
    # A marker naming a job still queued does hold it back: that job will read the session.
    assert (
        reconcile(
            store, client, stale_pending_s=3600, stuck_job_s=3600, unobserved_threshold=threshold
        )[0]
        == []
    )


def _started_an_hour_ago(store: SqlStore, *job_ids: str) -> None:
    """Age running jobs in the store instead of sleeping: a loaded machine cannot then make a
    job started just now look older than the window the test passes."""
    with store.engine.begin() as connection:
        connection.execute(
            update(flush_jobs)
            .where(flush_jobs.c.id.in_(job_ids))
            .values(started_at=utc_now() - timedelta(hours=1))
        )


def test_a_running_job_whose_lock_is_gone_is_failed_and_its_session_requested_at_once(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    for session in ("dead", "alive", "young"):
        store.create_session(tenant, session)
    dead = store.create_job(tenant, "dead").id
    store.start_job(tenant, dead)  # its worker died: no lock, no heartbeat
    alive = store.create_job(tenant, "alive").id
    store.start_job(tenant, alive)
    holder = SessionLock(client, tenant, "alive")
    assert holder.acquire()  # an alive worker keeps its lock
    _started_an_hour_ago(store, dead, alive)
    young = store.create_job(tenant, "young").id
    store.start_job(tenant, young)  # started less than a lock TTL ago: not judged yet
    published, report = reconcile(
        store, client, stale_pending_s=3600, stuck_job_s=7200, lost_after_s=600
    )
    assert report.failed_jobs == (dead,)
    row = store.get_job(tenant, dead)
    assert row.state == "failed" and row.error is not None and "lock expired" in row.error
    assert store.get_job(tenant, alive).state == "running"
    assert store.get_job(tenant, young).state == "running"
    assert [(t, s) for t, s, _ in published] == [(tenant, "dead")]  # requested at once
    holder.release()


def test_a_job_pending_behind_a_swept_job_is_published_again_at_once(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    # Requested while the dead worker held the lock: its message met the lock and was dropped,
    # and the dead holder's release never re-published it. A fresh marker, so only the sweep
    # can notice it.
    store.create_session(tenant, "s")
    dead = store.create_job(tenant, "s").id
    store.start_job(tenant, dead)
    pending = store.create_job(tenant, "s").id
    client.set(keys.pending_key(tenant, "s"), pending)
    _started_an_hour_ago(store, dead)
    published, report = reconcile(
        store, client, stale_pending_s=3600, stuck_job_s=7200, lost_after_s=600
    )
    assert report.failed_jobs == (dead,)
    assert published == [(tenant, "s", pending)] and report.republished == (pending,)
    assert report.requested == ()  # no new job: the pending one serves the session
    assert store.get_job(tenant, pending).state == "queued"
