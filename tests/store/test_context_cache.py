"""The per-process context cache: a kept context is served only while everything it is a
function of is unchanged, and always equals a context built afresh from the whole branch.
SQLite and, with ``OM_TEST_DATABASE_URL``, PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from store_factories import assistant, message, observations, reflections

import om_workers.context_cache as cache_module
from om_core import resolve_settings
from om_core.ledger.funnel import funnel_copy_id
from om_core.ledger.ids import create_memory_id
from om_core.ledger.models import Observation, ObservationsRecorded, SessionEntry
from om_core.read.context import Context, build_context
from om_core.read.context_memory import ContextMemory
from om_core.read.tail_messages import TailMessages
from om_core.settings import ObservationalMemorySettings
from om_workers.context_cache import (
    CacheCounts,
    ContextCache,
    ContextKey,
    MemoryKey,
    context_cache,
    secrets_digest,
)
from om_workers.errors import SessionNotFoundError
from om_workers.reads import ContextBuild, read_context, session_context
from om_workers.store import SqlStore, tombstone_scope

SETTINGS = resolve_settings({"context": {"recentMessages": 4}})
BUDGET = 600
CANARY = "canary-51c0-heron"


def _grow(store: SqlStore, tenant: str, session_id: str, runs: int) -> None:
    """Turns with a memory record every other run, and messages after the last one."""
    for run in range(runs):
        store.append_entries(
            tenant,
            session_id,
            [
                message(f"u{run}", session_id, f"question {run} " + "word " * 30),
                assistant(f"a{run}", session_id, f"answer {run} sk-live-1"),
            ],
        )
        if run % 2 == 1:
            record, ids = observations(f"o{run}", [f"u{run}", f"a{run}"], f"a{run}", session_id)
            store.append_entries(tenant, session_id, record)
            if run % 4 == 3:
                store.append_entries(
                    tenant, session_id, reflections(f"rf{run}", ids, f"o{run}", session_id)
                )
    store.append_entries(tenant, session_id, message("late", session_id, "not observed yet"))


def _read(
    store: SqlStore,
    tenant: str,
    session_id: str,
    *,
    secrets: Iterable[str] = ("sk-live-1",),
    settings: ObservationalMemorySettings = SETTINGS,
    max_tokens: int | None = BUDGET,
) -> Context:
    return session_context(
        store, tenant, session_id, settings=settings, secrets=secrets, max_tokens=max_tokens
    )


def _fresh(
    store: SqlStore,
    tenant: str,
    session_id: str,
    *,
    secrets: Iterable[str] = ("sk-live-1",),
    settings: ObservationalMemorySettings = SETTINGS,
    max_tokens: int | None = BUDGET,
) -> Context:
    """The context built from the whole branch, nothing kept."""
    withheld = store.invalidated_ids(tenant, tombstone_scope(session_id))
    return build_context(
        store.read_branch(tenant, session_id),
        settings,
        withheld,
        secrets,
        max_tokens=max_tokens,
    )


def _same(got: Context, want: Context) -> None:
    assert got.model_dump_json() == want.model_dump_json()


def _counts(store: SqlStore) -> CacheCounts:
    counts = context_cache(store).counts
    return CacheCounts(**vars(counts))


def _delta(store: SqlStore, before: CacheCounts) -> tuple[int, int, int, int]:
    now = context_cache(store).counts
    return (
        now.context_hits - before.context_hits,
        now.context_misses - before.context_misses,
        now.memory_hits - before.memory_hits,
        now.memory_misses - before.memory_misses,
    )


@pytest.fixture
def grown(store: SqlStore, tenant: str, session_id: str) -> str:
    _grow(store, tenant, session_id, runs=12)
    return session_id


def test_an_unchanged_session_is_answered_from_the_cache(
    store: SqlStore, tenant: str, grown: str
) -> None:
    first = _read(store, tenant, grown)
    before = _counts(store)
    again = _read(store, tenant, grown)
    assert _delta(store, before) == (1, 0, 0, 0)
    assert again is first
    _same(again, _fresh(store, tenant, grown))
    assert "sk-live-1" not in again.recent.text + again.memory.text


def test_an_append_builds_the_tail_again_on_the_kept_memory(
    store: SqlStore, tenant: str, grown: str
) -> None:
    _read(store, tenant, grown)
    for n in range(5):
        store.append_entries(tenant, grown, message(f"more{n}", grown, "x " * 90 * n))
        before = _counts(store)
        got = _read(store, tenant, grown)
        assert _delta(store, before) == (0, 1, 1, 0)
        assert f"more{n}" in got.recent.entry_ids
        _same(got, _fresh(store, tenant, grown))


def test_a_read_leaves_a_build_cold_until_the_memory_part_is_kept(
    store: SqlStore, tenant: str, grown: str
) -> None:
    def found() -> Context | ContextBuild:
        return read_context(
            store, tenant, grown, settings=SETTINGS, secrets=("sk-live-1",), max_tokens=BUDGET
        )

    cold = found()
    assert isinstance(cold, ContextBuild) and not cold.warm
    built = cold()
    assert found() is built  # kept: nothing left to build
    store.append_entries(tenant, grown, message("more", grown, "one more question"))
    warm = found()
    assert isinstance(warm, ContextBuild) and warm.warm
    _same(warm(), _fresh(store, tenant, grown))
    record, _ = observations("o-late", ["more"], "more", grown)
    store.append_entries(tenant, grown, record)
    after_memory = found()
    assert isinstance(after_memory, ContextBuild) and not after_memory.warm
    _same(after_memory(), _fresh(store, tenant, grown))


def test_a_memory_record_builds_the_memory_part_again(
    store: SqlStore, tenant: str, grown: str
) -> None:
    _read(store, tenant, grown)
    record, _ = observations("o-late", ["late"], "late", grown)
    store.append_entries(tenant, grown, record)
    before = _counts(store)
    got = _read(store, tenant, grown)
    assert _delta(store, before) == (0, 1, 0, 1)
    assert got.unobserved.messages == 0  # the record covers every message now
    _same(got, _fresh(store, tenant, grown))


def test_a_tombstone_withholds_at_once(store: SqlStore, tenant: str, grown: str) -> None:
    kept = _read(store, tenant, grown, max_tokens=None)
    assert "fact from u1" in kept.memory.text
    store.add_tombstones(tenant, tombstone_scope(grown), ["u1"])
    before = _counts(store)
    got = _read(store, tenant, grown, max_tokens=None)
    assert _delta(store, before) == (0, 1, 0, 1)
    assert "fact from u1" not in got.memory.text
    _same(got, _fresh(store, tenant, grown, max_tokens=None))


def test_a_newly_known_secret_is_redacted_at_once(store: SqlStore, tenant: str, grown: str) -> None:
    assert "question 11" in _read(store, tenant, grown, max_tokens=None).recent.text
    before = _counts(store)
    got = _read(store, tenant, grown, secrets=("sk-live-1", "question"), max_tokens=None)
    assert _delta(store, before) == (0, 1, 0, 1)
    assert "question" not in got.recent.text + got.memory.text
    _same(got, _fresh(store, tenant, grown, secrets=("sk-live-1", "question"), max_tokens=None))


def test_other_settings_and_budgets_are_kept_apart(
    store: SqlStore, tenant: str, grown: str
) -> None:
    wide = resolve_settings({"context": {"recentMessages": 12}})
    reads = [(SETTINGS, BUDGET), (wide, BUDGET), (SETTINGS, 2_000), (SETTINGS, None)]
    for settings, budget in reads:
        _read(store, tenant, grown, settings=settings, max_tokens=budget)
    before = _counts(store)
    for settings, budget in reads:
        got = _read(store, tenant, grown, settings=settings, max_tokens=budget)
        _same(got, _fresh(store, tenant, grown, settings=settings, max_tokens=budget))
    assert _delta(store, before) == (4, 0, 0, 0)


def test_an_erased_session_is_forgotten(store: SqlStore, tenant: str, grown: str) -> None:
    _read(store, tenant, grown)
    assert context_cache(store).sizes() == (1, 1)
    store.erasure.erase_session(tenant, grown, None)
    with pytest.raises(SessionNotFoundError):
        _read(store, tenant, grown)
    assert context_cache(store).sizes() == (0, 0)


def test_a_rewrite_in_place_is_never_answered_from_before_it(store: SqlStore, tenant: str) -> None:
    # Erasing a child rewrites its copies on the workspace in place (placeholders): the
    # workspace's entries keep their ids, so only the row's rewrite says the text changed.
    store.create_session(tenant, "ws")
    store.append_entries(tenant, "ws", message("w0", "ws", "parent asks"))
    store.create_session(tenant, "child", workspace="ws")
    store.append_entries(tenant, "child", assistant("c1", "child", f"tool said {CANARY}"))
    copy_id = funnel_copy_id("ws", "child", "c1")
    recorded = ObservationsRecorded(
        observations=(
            Observation(id=create_memory_id(), text=f"saw {CANARY}", source_entry_ids=(copy_id,)),
        ),
        covers_up_to_id=copy_id,
    )
    entry = SessionEntry(id="ws-obs", session_id="ws", kind="custom", data=recorded.to_json_dict())
    store.append_memory(tenant, "ws", entry, store.raise_epoch(tenant, "ws"))
    store.append_entries(tenant, "ws", message("w1", "ws", "after the child"))
    seen = _read(store, tenant, "ws", max_tokens=None)
    assert CANARY in seen.memory.text + seen.recent.text
    job = store.erasure.erase_session(tenant, "child", None)
    started = store.erasure.start_job(job.id)
    assert started is not None
    for target in started[1]:
        store.erasure.erase_target(target)
    got = _read(store, tenant, "ws", max_tokens=None)
    assert CANARY not in got.memory.text + got.recent.text
    _same(got, _fresh(store, tenant, "ws", max_tokens=None))


def test_another_process_writes_are_seen_at_once(
    store: SqlStore, tenant: str, grown: str, migrated_url: str
) -> None:
    # Two API processes: each has its own cache of the same database.
    other = SqlStore.from_url(migrated_url)
    try:
        _read(store, tenant, grown)
        _read(other, tenant, grown)
        other.append_entries(tenant, grown, message("elsewhere", grown, "from the other one"))
        record, _ = observations("o-else", ["elsewhere"], "elsewhere", grown)
        other.append_entries(tenant, grown, record)
        other.add_tombstones(tenant, tombstone_scope(grown), ["u3"])
        _same(_read(store, tenant, grown), _fresh(store, tenant, grown))
        _same(_read(other, tenant, grown), _fresh(other, tenant, grown))
    finally:
        other.close()


def _key(session_id: str) -> ContextKey:
    now = datetime.now(UTC)
    return ContextKey(
        tenant_id="t",
        session_id=session_id,
        created_at=now,
        updated_at=now,
        rewritten_at=None,
        leaf_id="e1",
        entry_count=1,
        withheld=frozenset(),
        secrets=secrets_digest(()),
        settings=SETTINGS,
        scope=None,
        include="self+ancestors",
        max_tokens=None,
    )


def test_kept_values_are_bounded_and_aged() -> None:
    with pytest.raises(ValueError, match="max_age_s > 0"):
        ContextCache(max_age_s=0)
    with pytest.raises(ValueError, match="max_contexts, max_memories"):
        ContextCache(max_contexts=0)
    empty = build_context((), SETTINGS)
    cache = ContextCache(max_contexts=2, max_age_s=0.05)
    first, second, third = _key("s1"), _key("s2"), _key("s3")
    for key in (first, second, third):
        cache.context(key, lambda: empty)
    assert cache.sizes() == (2, 0)  # the least recently used went
    cache.context(first, lambda: empty)
    assert cache.counts.context_misses == 4 and cache.counts.context_hits == 0
    cache.context(third, lambda: empty)
    assert cache.counts.context_hits == 1
    time.sleep(0.1)
    cache.context(third, lambda: empty)
    assert cache.counts.context_hits == 1  # too old: built again
    cache.forget("t", "s3")
    assert cache.sizes() == (1, 0)


def _memory_key(session_id: str) -> MemoryKey:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return MemoryKey(
        tenant_id="t",
        session_id=session_id,
        created_at=now,
        rewritten_at=None,
        snapshot_entry_id=None,
        memory_entry_ids=(),
        withheld=frozenset(),
        secrets=secrets_digest(()),
        scope=None,
        include="self+ancestors",
    )


def _memory_of(facts: int) -> ContextMemory:
    record, _ = observations("o1", [f"m{i}" for i in range(facts)], f"m{facts - 1}")
    return ContextMemory([record], (), (), {})


def test_memory_parts_are_bounded_by_their_size() -> None:
    with pytest.raises(ValueError, match="max_memory_chars >= 1"):
        ContextCache(max_memory_chars=0)
    small, large = _memory_of(2), _memory_of(40)
    assert 0 < small.size < large.size
    # Room for 3 small parts, not for a large one beside them.
    cache = ContextCache(max_memory_chars=3 * small.size)
    for n in range(3):
        cache.memory(_memory_key(f"s{n}"), lambda: small)
    assert cache.sizes()[1] == 3  # exactly the budget: all kept
    cache.memory(_memory_key("s3"), lambda: small)
    assert cache.sizes()[1] == 3  # one over: the oldest went
    assert not cache.holds_memory(_memory_key("s0"))
    assert cache.holds_memory(_memory_key("s1"))
    cache.memory(_memory_key("big"), lambda: large)
    assert cache.sizes()[1] == 1  # the older ones went; the newest stays, whatever its size
    assert cache.holds_memory(_memory_key("big"))
    assert not cache.holds_memory(_memory_key("s3"))
    # Many small parts are kept by size, not by a count of a few dozen.
    roomy = ContextCache(max_memory_chars=200 * small.size)
    for n in range(200):
        roomy.memory(_memory_key(f"s{n}"), lambda: small)
    assert roomy.sizes()[1] == 200
    roomy.memory(_memory_key("s0"), lambda: small)
    assert roomy.counts.memory_hits == 1


def test_tail_walks_are_bounded_by_the_entries_they_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Room for three walks of ten entries: a fourth lets the oldest go (its session's next
    # read walks anew), and the newest stays whatever its size.
    monkeypatch.setattr(cache_module, "MAX_TAIL_ENTRIES", 30)
    cache, memory = ContextCache(), _memory_of(2)
    tails = {f"s{n}": [message(f"s{n}-{i}", f"s{n}") for i in range(10)] for n in range(4)}
    tails["big"] = [message(f"big-{i}", "big") for i in range(50)]

    def walk(session: str) -> TailMessages:
        return cache.tail_messages(_memory_key(session), tails[session], memory)

    first = {n: walk(f"s{n}") for n in range(3)}
    assert first[0].walked == 10
    assert walk("s0").columns is first[0].columns  # exactly the budget: all kept
    walk("s3")  # one over: the oldest put (s1) goes
    assert walk("s2").columns is first[2].columns
    assert walk("s1").columns is not first[1].columns
    big = walk("big")  # the others go; the newest stays, whatever its size
    assert big.walked == 50 and walk("big").columns is big.columns
    assert walk("s2").columns is not first[2].columns


def test_a_new_memory_part_finds_its_sessions_earlier_one_while_it_is_kept() -> None:
    cache = ContextCache()
    first = _memory_key("s1")
    grown = replace(first, memory_entry_ids=("m1",))
    assert cache.earlier_memory(grown) is None  # nothing kept yet
    kept = _memory_of(3)
    cache.memory(first, lambda: kept)
    assert cache.earlier_memory(grown) is kept
    assert cache.earlier_memory(first) is None  # its own key: it is kept, not earlier
    # Another session, or the same one read with other secrets, scope or include, or
    # created anew under the same id, lends nothing.
    others = [
        _memory_key("s2"),
        replace(grown, secrets=secrets_digest(["pw"])),
        replace(grown, scope="task-1"),
        replace(grown, include="self"),
        replace(grown, created_at=datetime(2026, 2, 1, tzinfo=UTC)),
    ]
    assert all(cache.earlier_memory(key) is None for key in others)
    cache.forget("t", "s1")  # erased: nothing of it is lent
    assert cache.earlier_memory(grown) is None
    aged = ContextCache(max_age_s=0.05)
    aged.memory(first, lambda: kept)
    time.sleep(0.1)
    assert aged.earlier_memory(grown) is None
