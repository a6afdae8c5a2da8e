"""The in-process runtime: thresholds, chunked backlogs, steps, fail-closed paths, backoff."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.provider import ProviderRequest, ProviderResponse, ScriptedProvider
from om_core.flush.runtime import FlushResult, ObservationalMemoryRuntime, WorkerConfig
from om_core.flush.workers.dropper import observation_tokens
from om_core.flush.workers.protocol import parse_block
from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import Message, Observation, Reflection, SessionEntry, ToolCall
from om_core.policy.limits import WorkerLimits
from om_core.scopes.index import fold_work_scope_map
from om_core.scopes.records import ScopeEntered, ScopeOpened
from tests.core.builders import Branch, mid

SECRET = "sk-live-abcdef"
LOW = {
    "observation": {"messageTokens": 1},
    "reflection": {"observationTokens": 100_000},
    "context": {"observationsPoolMaxTokens": 100_000},
}


class Session(Branch):
    """A linear in-memory session: ``id``, ``get_entries()`` and an append callback."""

    @property
    def id(self) -> str:
        return self.session_id

    def get_entries(self) -> Sequence[SessionEntry]:
        return list(self.entries)

    def append(self, entry: SessionEntry) -> None:
        self.entries.append(entry)


def chat(session: Session, turns: int, start: int = 0) -> None:
    for i in range(start, start + turns):
        session.user(f"Question {i}: what is the status of ticket {i}?")
        session.assistant(f"Ticket {i} is resolved, the fix was deployed on day {i}.")


def runtime(session: Session, settings: Any = None, **kw: Any) -> ObservationalMemoryRuntime:
    kw.setdefault("observation", WorkerConfig(provider=ExtractiveProvider()))
    kw.setdefault("session_model", "extractive")
    return ObservationalMemoryRuntime(
        session, append_entry=session.append, settings=settings or LOW, **kw
    )


def memory_types(session: Session) -> list[str]:
    return [e.record_type or "" for e in session.entries if e.kind == "custom"]


def test_below_threshold_skips_observer() -> None:
    s = Session()
    chat(s, 1)
    result = runtime(s, {"observation": {"messageTokens": 10_000}}).flush()
    assert ("observer", "below_threshold") in [(k.worker, k.reason) for k in result.skipped]
    assert result.appended_entry_ids == ()


def test_empty_observer_run_still_advances_coverage() -> None:
    s = Session()
    chat(s, 2)
    last = s.entries[-1].id
    result = runtime(
        s, observation=WorkerConfig(provider=ScriptedProvider([], then_stop=True))
    ).flush()
    assert result.error is None and result.observation_ids == ()
    assert fold_ledger(s.entries).observation_covers_up_to_id == last
    again = runtime(s).flush()
    assert again.appended_entry_ids == ()  # nothing unscanned is eligible any more


def test_an_observer_that_records_nothing_says_so() -> None:
    s = Session()
    chat(s, 2)
    result = runtime(
        s, observation=WorkerConfig(provider=ScriptedProvider([], then_stop=True))
    ).flush()
    assert result.advanced and not result.recorded  # a coverage marker only
    assert result.observed_messages == 4
    assert result.note is not None
    assert result.note.startswith("observer observed 4 messages, recorded nothing; ")
    assert "reflector below threshold" in result.note
    below = runtime(s, {"observation": {"messageTokens": 10_000}}).flush()
    assert below.note is not None and "observer observed" not in below.note
    recorded = Session()
    chat(recorded, 2)
    assert runtime(recorded).flush().note is None  # it recorded observations


def test_backlog_larger_than_transcript_cap_is_chunked_oldest_first() -> None:
    s = Session()
    chat(s, 30)
    seen: list[list[str]] = []

    def observer(request: ProviderRequest) -> ProviderResponse:
        seen.append([line["id"] for line in parse_block(request.messages[1].text, "transcript")])
        return ProviderResponse(message=Message(role="assistant"))

    limits = WorkerLimits(max_message_bytes=4096)
    provider = ScriptedProvider([observer] * 50)
    # Short instructions: the default ones alone would fill most of this tiny cap.
    config = WorkerConfig(provider=provider, instructions="Observe the transcript.")
    result = runtime(s, observation=config, limits=limits).flush()
    assert result.error is None
    assert len(seen) >= 3
    flat = [i for chunk in seen for i in chunk]
    assert flat == [e.id for e in s.entries if e.kind == "message"]  # all, once, in order
    for request in provider.requests:
        assert sum(len(m.model_dump_json()) for m in request.messages) < 4096
    cursors = [e.data["coversUpToId"] for e in s.entries if e.kind == "custom" and e.data]
    assert cursors == [chunk[-1] for chunk in seen]


def test_chunks_never_exceed_the_call_budget() -> None:
    s = Session()
    chat(s, 20)
    limits = WorkerLimits(max_turns=2, max_tool_calls_per_turn=5, max_tool_calls=8)
    result = runtime(s, limits=limits).flush()
    assert result.error is None
    assert len(result.observation_ids) == 40  # one per message across 5 chunks of 8
    assert memory_types(s).count("om.observations.recorded") == 5


def _seed_observations(s: Session, count: int, relevance: float = 0.5) -> list[str]:
    chat(s, count // 2 + 1)
    observations = [
        Observation(
            id=mid(i),
            text=f"Observation {i} about ticket {i} and its deployment history",
            source_entry_ids=(s.entries[0].id,),
            relevance=relevance if i % 2 else 0.9,
        )
        for i in range(1, count + 1)
    ]
    s.observe(*observations, covers=s.entries[-1].id)
    return [o.id for o in observations]


def test_reflects_only_uncovered_unless_full_rebuild() -> None:
    s = Session()
    ids = _seed_observations(s, 8)
    settings = {**LOW, "reflection": {"observationTokens": 10}}
    first = runtime(s, settings).flush()
    assert first.error is None and first.reflection_ids
    cited = {oid for e in fold_ledger(s.entries).reflections for oid in e.observation_ids}
    assert cited == set(ids)
    second = runtime(s, settings).flush()
    assert second.reflection_ids == ()  # nothing uncovered
    rebuilt = runtime(s, settings).flush(full_reflection_rebuild=True)
    assert rebuilt.reflection_ids and rebuilt.error is None


def test_a_full_rebuild_reflects_below_the_threshold() -> None:
    s = Session()
    _seed_observations(s, 8)
    settings = {**LOW, "reflection": {"observationTokens": 100_000}}
    plain = runtime(s, settings).flush()
    assert plain.reflection_ids == ()
    assert ("reflector", "below_threshold") in [(k.worker, k.reason) for k in plain.skipped]
    rebuilt = runtime(s, settings).flush(full_reflection_rebuild=True)
    assert rebuilt.error is None and rebuilt.reflection_ids


def test_drop_lowest_relevance_down_to_target_and_skipped_with_host_scopes() -> None:
    settings = {
        **LOW,
        "reflection": {"observationTokens": 10},
        "context": {"observationsPoolMaxTokens": 40},
        "dropper": {"targetTokens": 20, "policy": "lowest-relevance"},
    }
    s = Session()
    _seed_observations(s, 6, relevance=0.1)
    result = runtime(s, settings).flush()
    assert result.reflection_ids  # reflected first: a dropped support stays one recall away
    assert result.dropped_observation_ids[:3] == (mid(1), mid(3), mid(5))
    pool = fold_ledger(s.entries).active_observations
    assert observation_tokens(pool) <= 20
    scoped = Session()
    _seed_observations(scoped, 6)
    scoped.custom(ScopeOpened(id="task:a").to_json_dict())
    skipped = runtime(scoped, settings).flush()
    assert ("dropper", "host_scopes") in [(k.worker, k.reason) for k in skipped.skipped]


def test_observations_no_reflection_went_over_are_never_dropped() -> None:
    settings = {
        **LOW,
        "context": {"observationsPoolMaxTokens": 40},
        "dropper": {"targetTokens": 20, "policy": "lowest-relevance"},
    }
    s = Session()
    ids = _seed_observations(s, 6, relevance=0.1)
    result = runtime(s, settings).flush()
    assert result.dropped_observation_ids == ()
    assert ("dropper", "nothing_reflected") in [(k.worker, k.reason) for k in result.skipped]
    assert [o.id for o in fold_ledger(s.entries).active_observations] == ids


def test_model_dropper_uses_provider() -> None:
    settings = {
        **LOW,
        "reflection": {"observationTokens": 10},
        "context": {"observationsPoolMaxTokens": 40},
        "dropper": {"targetTokens": 20},
    }
    s = Session()
    _seed_observations(s, 6, relevance=0.1)
    result = runtime(s, settings).flush()
    assert "dropper" in result.ran and result.dropped_observation_ids


def test_new_ids_are_bound_to_the_leaf_scope() -> None:
    s = Session()
    s.custom(ScopeOpened(id="task:a").to_json_dict())
    s.custom(ScopeEntered(scope_id="task:a").to_json_dict())
    chat(s, 2)
    result = runtime(s).flush()
    refs = fold_work_scope_map(s.entries).refs("task:a")
    assert refs == {f"om:{oid}" for oid in result.observation_ids}
    assert len(refs) == 4


def test_a_bind_past_the_scope_cap_fails_the_step_instead_of_vanishing() -> None:
    from om_core.scopes.records import MAX_WORK_SCOPE_BINDS, ScopeBound

    s = Session()
    s.custom(ScopeOpened(id="task:a").to_json_dict())
    s.custom(ScopeEntered(scope_id="task:a").to_json_dict())
    full = tuple(f"om:{mid(i)}" for i in range(1, MAX_WORK_SCOPE_BINDS + 1))
    s.custom(ScopeBound(scope_id="task:a", refs=full).to_json_dict())
    assert len(fold_work_scope_map(s.entries).refs("task:a")) == MAX_WORK_SCOPE_BINDS
    chat(s, 1)
    result = runtime(s).flush()
    assert result.observation_ids and result.error and "ScopeCapError" in result.error
    assert fold_work_scope_map(s.entries).refs("task:a") == set(full)


def test_append_not_visible_at_leaf_fails_closed() -> None:
    s = Session()
    chat(s, 2)
    elsewhere: list[SessionEntry] = []
    rt = ObservationalMemoryRuntime(
        s,
        append_entry=elsewhere.append,
        settings=LOW,
        observation=WorkerConfig(provider=ExtractiveProvider()),
        session_model="x",
    )
    result = rt.flush()
    assert result.error is not None and "AppendNotVisibleError" in result.error
    assert rt.last_error == result.error
    assert result.appended_entry_ids == ()


def test_model_selection_and_credentials() -> None:
    s = Session()
    chat(s, 1)
    explicit = {**LOW, "observation": {"messageTokens": 1, "requireExplicitModel": True}}
    result = runtime(s, explicit).flush()
    assert ("observer", "missing_model") in [(k.worker, k.reason) for k in result.skipped]
    assert runtime(s, session_model=None).flush().skipped[0].reason == "missing_model"
    none = ObservationalMemoryRuntime(s, append_entry=s.append, settings=LOW, session_model="m")
    assert none.flush().skipped[0].reason == "missing_provider"
    wants = WorkerConfig(provider=ExtractiveProvider(), credential="openai")
    missing = runtime(s, observation=wants, credentials=lambda name: None).flush()
    assert missing.skipped[0].reason == "missing_credential"
    scripted = ScriptedProvider([], then_stop=True)
    by_model = WorkerConfig(provider=scripted, model="openai/gpt-x", request_credential=True)
    keys = {"openai": SECRET}
    ok = runtime(s, observation=by_model, credentials=keys.get).flush()
    assert ok.error is None and scripted.requests[0].credential == SECRET
    assert scripted.requests[0].model == "openai/gpt-x"


def test_settings_name_providers_and_thinking_level() -> None:
    s = Session()
    chat(s, 1)
    scripted = ScriptedProvider([], then_stop=True)
    settings = {**LOW, "observation": {"messageTokens": 1, "provider": "p", "thinkingLevel": "low"}}
    rt = ObservationalMemoryRuntime(
        s, append_entry=s.append, settings=settings, providers={"p": scripted}, session_model="m"
    )
    assert rt.flush().error is None
    assert scripted.requests[0].options == {"thinkingLevel": "low"}


def test_backoff_after_runs_that_do_not_advance_and_redacted_last_error() -> None:
    s = Session()
    chat(s, 1)
    failing = ScriptedProvider([RuntimeError(f"401 for key {SECRET}")] * 10)
    rt = runtime(s, observation=WorkerConfig(provider=failing), secrets=[SECRET], backoff_after=2)
    results = [rt.flush() for _ in range(3)]
    assert [r.error is not None for r in results] == [True, True, False]
    assert results[2].skipped[0].reason == "backoff"
    assert len(failing.requests) == 2
    assert rt.last_error is not None and SECRET not in rt.last_error
    chat(s, 1, start=5)  # new work: the session may try again
    assert rt.flush().error is not None and len(failing.requests) == 3


def test_one_pipeline_at_a_time() -> None:
    s = Session()
    chat(s, 1)
    inner: list[FlushResult] = []

    def reentrant(request: ProviderRequest) -> ProviderResponse:
        inner.append(rt.flush())
        assert rt.in_flight
        return ProviderResponse(message=Message(role="assistant"))

    rt = runtime(s, observation=WorkerConfig(provider=ScriptedProvider([reentrant])))
    assert rt.flush().error is None
    assert inner[0].skipped[0].reason == "busy"
    assert not rt.in_flight


def test_invalid_records_fail_closed_and_write_nothing() -> None:
    s = Session()
    chat(s, 1)
    bad = Message(
        role="assistant",
        tool_calls=(
            ToolCall(
                id="c",
                name="record_observation",
                arguments={"text": "made up", "sourceEntryIds": ["not-there"]},
            ),
        ),
    )
    result = runtime(s, observation=WorkerConfig(provider=ScriptedProvider([bad]))).flush()
    assert result.error is not None and "WorkerCitationError" in result.error
    assert memory_types(s) == []


def test_compaction_gate() -> None:
    s = Session()
    chat(s, 3)
    compacted: list[int] = []
    events: list[str] = []
    rt = runtime(
        s,
        {**LOW, "context": {"compactAfterTokens": 10}},
        compact=lambda: compacted.append(1),
    )
    assert rt.flush().compacted and compacted == [1]

    def broken(entries: Sequence[SessionEntry]) -> bool:
        raise RuntimeError(f"no cap for {SECRET}")

    rt = runtime(
        s,
        compact=lambda: compacted.append(2),
        should_compact=broken,
        secrets=[SECRET],
        debug=lambda event, data: events.append(f"{event} {data['error']}"),
    )
    assert not rt.flush().compacted and compacted == [1]
    assert events and events[0].startswith("observational-memory:compaction-trigger-error")
    assert SECRET not in events[0]


def test_a_failed_step_writes_nothing_and_later_steps_still_run() -> None:
    settings = {
        **LOW,
        "context": {"observationsPoolMaxTokens": 40},
        "dropper": {"targetTokens": 20, "policy": "lowest-relevance"},
    }
    s = Session()
    ids = _seed_observations(s, 6, relevance=0.1)
    # A reflection went over them, so the dropper may drop them.
    s.reflect(Reflection(id=mid(99), text="six facts", observation_ids=tuple(ids)))
    chat(s, 2, start=50)
    failing = ScriptedProvider([RuntimeError("observer down")])
    result = runtime(s, settings, observation=WorkerConfig(provider=failing)).flush()
    assert result.error is not None and "observer down" in result.error
    assert result.observation_ids == ()
    assert result.dropped_observation_ids  # the drop step still ran
    assert memory_types(s)[-1] == "om.observations.dropped"


def test_force_observes_below_the_threshold() -> None:
    s = Session()
    chat(s, 1)
    high = {**LOW, "observation": {"messageTokens": 100_000}}
    assert ("observer", "below_threshold") in [
        (k.worker, k.reason) for k in runtime(s, high).flush().skipped
    ]
    forced = runtime(s, high).flush(force=True)
    assert len(forced.observation_ids) == 2
    assert runtime(s, high).flush(force=True).observation_ids == ()  # nothing new to observe


def test_revoked_entries_never_reach_the_observer() -> None:
    s = Session()
    chat(s, 2)
    revoked = s.entries[0].id
    result = runtime(s, invalidated_ids=lambda: [revoked]).flush()
    ledger = fold_ledger(s.entries)
    assert len(result.observation_ids) == 3
    assert all(revoked not in o.source_entry_ids for o in ledger.observations)
