"""``om.reconcile``'s pass and the worker time-limit settings, without Celery workers."""

from __future__ import annotations

import pytest
import redis

from om_workers import redis_keys
from om_workers.config import Settings
from om_workers.errors import ConfigError
from om_workers.locks import SessionLock
from om_workers.store import SqlStore
from om_workers.tasks import reconcile_once, stuck_run_age_s, time_limits


def test_reconcile_republishes_stale_unlocked_markers_and_fails_stuck_runs(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    for session in ("old", "locked", "fresh"):
        store.create_session(tenant, session)
    age_100s = redis_keys.PENDING_TTL_S - 100
    client.set(redis_keys.pending_key(tenant, "old"), "job-old", ex=age_100s)
    client.set(redis_keys.pending_key(tenant, "locked"), "job-locked", ex=age_100s)
    client.set(redis_keys.pending_key(tenant, "fresh"), "job-fresh")
    holder = SessionLock(client, tenant, "locked")
    assert holder.acquire()
    stuck = store.create_run(tenant, "old")
    store.start_run(tenant, stuck.id)
    published: list[tuple[str, str, str]] = []
    report = reconcile_once(
        store,
        client,
        lambda t, s, j: published.append((t, s, j)),
        stale_pending_s=10,
        stuck_run_s=0,
    )
    assert published == [(tenant, "old", "job-old")] and report.republished == ("job-old",)
    assert report.failed_runs == (stuck.id,)
    assert store.get_run(tenant, stuck.id).state == "failed"
    holder.release()


def test_time_limits_overrides_must_be_complete_ordered_and_above_the_lock_ttl() -> None:
    derived = time_limits(Settings())
    assert derived.visibility_timeout_s > Settings().lock_ttl_s
    assert stuck_run_age_s(Settings()) > derived.visibility_timeout_s
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
