"""``run_flush_job`` directly (no Celery) on a private real Redis and a SQLite store."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
import redis

from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.prompts import DEFAULT_PROMPTS, PromptSet
from om_core.flush.provider import Provider, ProviderRequest, ProviderResponse
from om_core.policy.webhooks import secret_from_bytes
from om_workers.celery.webhooks import announce
from om_workers.coordination import keys
from om_workers.coordination.locks import SessionLock
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.flush import run_flush_job
from om_workers.jobs.requests import request_flush
from om_workers.providers.setup import load_provider
from om_workers.store import SqlStore
from om_workers.store.console_queries import session_jobs
from tests.e2e.support import LOW, add_chat, covered_sources, fully_observed
from tests.store.test_flush_cost import recorded

SECRET = "sk-live-0123456789abcdef"
Published = list[tuple[str, str, str]]


def deps_for(store: SqlStore, client: redis.Redis, published: Published, **kw: object) -> FlushDeps:
    kw.setdefault("memory_settings", LOW)
    return FlushDeps(
        store=store,
        redis=client,
        publish=lambda t, s, j: published.append((t, s, j)),
        **kw,  # type: ignore[arg-type]
    )


def enqueue(deps: FlushDeps, tenant: str, session: str) -> str:
    return request_flush(deps.store, deps.redis, tenant, session, publish=deps.publish).job_id


@pytest.fixture
def published() -> Published:
    return []


@pytest.fixture
def chat(store: SqlStore, tenant: str) -> list[str]:
    store.create_session(tenant, "s1")
    return add_chat(store, tenant, "s1", 3)


def test_a_flush_below_the_threshold_says_why(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    deps = deps_for(store, client, published, memory_settings={})  # the 10,000-token default
    job = enqueue(deps, tenant, "s1")
    outcome = run_flush_job(deps, tenant, "s1", job, False)
    assert outcome.outcome == "succeeded" and outcome.counts["appended"] == 0
    row = store.get_job(tenant, job)
    assert row.reason is not None and row.reason.startswith("observer below threshold: ")
    tokens = store.get_session(tenant, "s1").unobserved_tokens
    assert f"{tokens} of 10000 tokens" in row.reason
    # A flush that recorded something has no reason to give.
    forced = request_flush(store, client, tenant, "s1", publish=deps.publish, force=True)
    assert run_flush_job(deps, tenant, "s1", forced.job_id, True).outcome == "succeeded"
    assert store.get_job(tenant, forced.job_id).reason is None


class _Overlaps(ExtractiveProvider):
    """The offline provider, counting how many of its calls run at once (each lasts 20 ms)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self.inside = 0
        self.most = 0

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        with self._mutex:
            self.inside += 1
            self.most = max(self.most, self.inside)
        try:
            time.sleep(0.02)  # long enough for another flush's call to come in beside it
            return super().generate(request)
        finally:
            with self._mutex:
                self.inside -= 1


def test_with_a_compute_lock_flushes_of_one_process_run_one_at_a_time(
    store: SqlStore, client: redis.Redis, tenant: str, published: Published
) -> None:
    provider = _Overlaps()
    deps = deps_for(store, client, published, provider=lambda: provider)
    deps = dataclasses.replace(deps, compute_lock=threading.Lock())
    jobs = {}
    for session in ("s1", "s2", "s3"):
        store.create_session(tenant, session)
        add_chat(store, tenant, session, 3)
        jobs[session] = enqueue(deps, tenant, session)
    outcomes: dict[str, str] = {}

    def flush(session: str) -> None:
        outcomes[session] = run_flush_job(deps, tenant, session, jobs[session], False).outcome

    threads = [threading.Thread(target=flush, args=(session,)) for session in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert outcomes == {"s1": "succeeded", "s2": "succeeded", "s3": "succeeded"}
    assert provider.most == 1


def test_flush_observes_every_message_once(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    deps = deps_for(store, client, published)
    job = enqueue(deps, tenant, "s1")
    assert published == [(tenant, "s1", job)]
    outcome = run_flush_job(deps, tenant, "s1", job, False)
    assert outcome.outcome == "succeeded", outcome.error
    row = store.get_job(tenant, job)
    assert row.state == "succeeded" and row.counts["observations"] == len(chat)
    assert sorted(covered_sources(store, tenant, "s1")) == sorted(chat)
    assert client.get(keys.lock_key(tenant, "s1")) is None


def test_coalesced_request_returns_pending_job_without_a_row(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    deps = deps_for(store, client, published)
    first = enqueue(deps, tenant, "s1")
    assert [enqueue(deps, tenant, "s1") for _ in range(5)] == [first] * 5
    assert len(published) == 1


def test_busy_lock_drops_the_message_and_keeps_pending(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    deps = deps_for(store, client, published)
    job = enqueue(deps, tenant, "s1")
    holder = SessionLock(client, tenant, "s1")
    assert holder.acquire()
    assert run_flush_job(deps, tenant, "s1", job, False).outcome == "busy"
    assert client.get(keys.pending_key(tenant, "s1")) == job
    assert store.get_job(tenant, job).state == "queued"
    assert holder.release().pending_job_id == job  # the holder re-publishes it
    assert run_flush_job(deps, tenant, "s1", job, False).outcome == "succeeded"


def test_finished_job_delivered_again_is_skipped(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    deps = deps_for(store, client, published)
    job = enqueue(deps, tenant, "s1")
    assert run_flush_job(deps, tenant, "s1", job, False).outcome == "succeeded"
    before = store.read_branch(tenant, "s1")
    for force in (False, True):
        assert run_flush_job(deps, tenant, "s1", job, force).outcome == "skipped"
    assert store.read_branch(tenant, "s1") == before


def test_redelivery_after_crash_runs_without_marker_and_duplicates_nothing(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    deps = deps_for(store, client, published)
    job = enqueue(deps, tenant, "s1")
    # A first attempt claimed the marker and started, then its worker died (lock expired).
    client.delete(keys.pending_key(tenant, "s1"))
    store.start_job(tenant, job)
    assert run_flush_job(deps, tenant, "s1", job, False).outcome == "succeeded"
    assert store.get_job(tenant, job).attempts == 2
    assert sorted(covered_sources(store, tenant, "s1")) == sorted(chat)


def test_request_during_a_job_is_published_on_release(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    later: list[str] = []

    class Asking(ExtractiveProvider):
        def generate(self, request: ProviderRequest) -> ProviderResponse:
            if not later:
                later.append(enqueue(deps, tenant, "s1"))
            return super().generate(request)

    deps = deps_for(store, client, published, provider=Asking)
    job = enqueue(deps, tenant, "s1")
    assert run_flush_job(deps, tenant, "s1", job, False).outcome == "succeeded"
    assert later and later[0] != job
    assert published[-2:] == [(tenant, "s1", later[0]), (tenant, "s1", later[0])]
    assert run_flush_job(deps, tenant, "s1", later[0], False).outcome == "succeeded"
    assert sorted(covered_sources(store, tenant, "s1")) == sorted(chat)


def test_stale_epoch_stops_the_write(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    class Overtaken(ExtractiveProvider):
        def generate(self, request: ProviderRequest) -> ProviderResponse:
            store.raise_epoch(tenant, "s1")  # a newer flush began while this one was thinking
            return super().generate(request)

    deps = deps_for(store, client, published, provider=Overtaken)
    job = enqueue(deps, tenant, "s1")
    outcome = run_flush_job(deps, tenant, "s1", job, False)
    assert outcome.outcome == "failed" and outcome.error is not None
    assert "stale epoch" in outcome.error
    assert covered_sources(store, tenant, "s1") == []
    assert [e.kind for e in store.read_branch(tenant, "s1")] == ["message"] * len(chat)
    # The newer flush reads the whole session: nothing is asked again for this one.
    assert published == [(tenant, "s1", job)]


def _lock_stolen(client: redis.Redis, tenant: str) -> type[Provider]:
    """A provider whose first call finds the session lock of s1 gone (a Redis restart)."""

    class LockStolen(ExtractiveProvider):
        def generate(self, request: ProviderRequest) -> ProviderResponse:
            client.delete(keys.lock_key(tenant, "s1"))
            time.sleep(0.5)  # several heartbeats (every 0.1 s) find the lock gone
            return super().generate(request)

    return LockStolen


def test_lost_lock_stops_the_write(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    deps = deps_for(store, client, published, provider=_lock_stolen(client, tenant), lock_ttl_s=0.3)
    job = enqueue(deps, tenant, "s1")
    outcome = run_flush_job(deps, tenant, "s1", job, False)
    assert outcome.outcome == "failed" and outcome.error is not None
    assert "no longer held" in outcome.error
    assert covered_sources(store, tenant, "s1") == []
    # Its work is not done and the lost lock took no marker to re-publish: the session is
    # requested again at once, and that job observes everything.
    assert len(published) == 2 and published[1][:2] == (tenant, "s1")
    again = published[1][2]
    assert again != job and store.get_job(tenant, again).state == "queued"
    plain = dataclasses.replace(deps, provider=ExtractiveProvider)
    assert run_flush_job(plain, tenant, "s1", again, False).outcome == "succeeded"
    assert fully_observed(store, tenant, "s1", chat)


def test_a_lost_job_asks_again_with_its_options_and_an_ask_that_fails_changes_no_outcome(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    def publish(tenant_id: str, session_id: str, job_id: str) -> None:
        if published:  # the broker is gone by the time the job asks again
            raise ConnectionError("broker unreachable")
        published.append((tenant_id, session_id, job_id))

    deps = dataclasses.replace(
        deps_for(store, client, published, provider=_lock_stolen(client, tenant), lock_ttl_s=0.3),
        publish=publish,
    )
    job = request_flush(store, client, tenant, "s1", publish=publish, force=True).job_id
    outcome = run_flush_job(deps, tenant, "s1", job, False)
    assert outcome.outcome == "failed" and outcome.error is not None
    assert "no longer held" in outcome.error
    asked = [run for run in session_jobs(store, tenant, "s1", 10) if run.id != job]
    assert len(asked) == 1 and asked[0].force  # the reconciler finds the session later
    assert asked[0].state == "failed" and "broker unreachable" in (asked[0].error or "")


def test_poison_message_fails_the_job_after_the_limit(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    deps = deps_for(store, client, published, max_deliveries=2)
    job = enqueue(deps, tenant, "s1")
    for _ in range(2):  # two earlier attempts started the job, then killed their workers
        store.start_job(tenant, job)
    outcome = run_flush_job(deps, tenant, "s1", job, False)
    assert outcome.outcome == "poison"
    row = store.get_job(tenant, job)
    assert row.state == "failed" and row.error is not None and "poison" in row.error
    assert covered_sources(store, tenant, "s1") == []


def test_provider_failure_fails_the_job_with_a_redacted_error(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    class Broken:
        def generate(self, request: ProviderRequest) -> ProviderResponse:
            raise RuntimeError(f"upstream rejected key {SECRET}")

    deps = deps_for(store, client, published, provider=Broken, secrets=(SECRET,))
    job = enqueue(deps, tenant, "s1")
    outcome = run_flush_job(deps, tenant, "s1", job, False)
    assert outcome.outcome == "failed"
    row = store.get_job(tenant, job)
    assert row.state == "failed" and row.error is not None
    assert "upstream rejected" in row.error and SECRET not in row.error
    assert covered_sources(store, tenant, "s1") == []
    # The same worker serves the next session normally.
    store.create_session(tenant, "s2")
    messages = add_chat(store, tenant, "s2", 2)
    ok = deps_for(store, client, published)
    assert run_flush_job(ok, tenant, "s2", enqueue(ok, tenant, "s2"), False).outcome == "succeeded"
    assert fully_observed(store, tenant, "s2", messages)


def test_unknown_job_is_dropped(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    deps = deps_for(store, client, published)
    assert run_flush_job(deps, tenant, "s1", "no-such-job", False).outcome == "unknown"


def test_load_provider() -> None:
    assert isinstance(load_provider("extractive"), ExtractiveProvider)
    slow = load_provider("tests.e2e.providers:slow")
    assert isinstance(slow, Provider)
    with pytest.raises(ValueError):
        load_provider("nonsense")
    with pytest.raises(ValueError):
        load_provider("tests.e2e.providers:missing")


def test_forced_job_observes_below_the_threshold_and_skips_revoked_entries(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    from om_workers.store import tombstone_scope

    high = {**LOW, "observation": {"messageTokens": 1_000_000}}
    deps = deps_for(store, client, published, memory_settings=high)
    plain = enqueue(deps, tenant, "s1")
    assert run_flush_job(deps, tenant, "s1", plain, False).outcome == "succeeded"
    assert covered_sources(store, tenant, "s1") == []

    store.add_tombstones(tenant, tombstone_scope("s1"), [chat[0]])
    forced = request_flush(store, client, tenant, "s1", publish=deps.publish, force=True)
    assert store.get_job(tenant, forced.job_id).force
    assert run_flush_job(deps, tenant, "s1", forced.job_id, False).outcome == "succeeded"
    assert sorted(covered_sources(store, tenant, "s1")) == sorted(chat[1:])


def test_a_marker_naming_a_job_that_already_ran_never_swallows_a_request(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    deps = deps_for(store, client, published)
    first = enqueue(deps, tenant, "s1")
    assert run_flush_job(deps, tenant, "s1", first, False).outcome == "succeeded"
    # The reconciler re-marked the job while it was starting: the marker outlives its read.
    client.set(keys.pending_key(tenant, "s1"), first)
    more = add_chat(store, tenant, "s1", 2, start=3)
    second = request_flush(store, client, tenant, "s1", publish=deps.publish)
    assert not second.coalesced and second.job_id != first
    assert run_flush_job(deps, tenant, "s1", second.job_id, False).outcome == "succeeded"
    assert sorted(covered_sources(store, tenant, "s1")) == sorted(chat + more)

    # A redelivered message of a finished job clears a marker still naming it.
    client.set(keys.pending_key(tenant, "s1"), first)
    assert run_flush_job(deps, tenant, "s1", first, False).outcome == "skipped"
    assert client.get(keys.pending_key(tenant, "s1")) is None


def test_job_row_records_the_prompt_version_it_ran_with(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    default = deps_for(store, client, published)
    job = enqueue(default, tenant, "s1")
    assert run_flush_job(default, tenant, "s1", job, False).outcome == "succeeded"
    assert store.get_job(tenant, job).prompt_version == DEFAULT_PROMPTS.version
    add_chat(store, tenant, "s1", 2, start=3)
    ours = deps_for(store, client, published, prompts=PromptSet("ours-1", "Observe.", "Reflect."))
    job = enqueue(ours, tenant, "s1")
    assert run_flush_job(ours, tenant, "s1", job, False).outcome == "succeeded"
    assert store.get_job(tenant, job).prompt_version == "ours-1"


def test_a_job_publishes_the_webhooks_its_finish_wrote_without_reading_them_back(
    store: SqlStore, client: redis.Redis, tenant: str, chat: list[str], published: Published
) -> None:
    deps = deps_for(store, client, published)
    quiet = enqueue(deps, tenant, "s1")
    outcome = run_flush_job(deps, tenant, "s1", quiet, False)
    assert outcome.outcome == "succeeded" and outcome.deliveries == ()  # no endpoint listens
    secret = secret_from_bytes(bytes(range(32)))
    store.webhooks.add_endpoint(
        tenant, "https://hooks.example.com/om", secret, ("flush.succeeded",)
    )
    add_chat(store, tenant, "s1", 1)
    job = enqueue(deps, tenant, "s1")
    outcome = run_flush_job(deps, tenant, "s1", job, False)
    assert outcome.deliveries == store.webhooks.pending_of(job) and len(outcome.deliveries) == 1
    sent: list[str] = []
    with recorded(store) as statements:
        announce(store, outcome.ran_job_id, lambda d, _: sent.append(d), outcome.deliveries)
    assert sent == list(outcome.deliveries) and statements == []
