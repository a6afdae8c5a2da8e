"""attach(): proxied runs flush, the compact-when gate, run_active, context blocks, and a long
tool-heavy session whose context stays under its caps while every planted fact is recallable."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from om_core.errors import AppendNotVisibleError, InvalidTriggerError
from om_core.flush.attach import CompactionGateContext, ObservationalMemory
from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.runtime import WorkerConfig
from om_core.flush.workers.dropper import observation_tokens
from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import SessionEntry
from om_core.ledger.tokens import estimate_entry_tokens, estimate_text_tokens
from om_core.policy.limits import MAX_RECENT_WINDOW_BYTES, MAX_RENDERED_MEMORY_BYTES
from om_core.read.recall import recall_memory
from tests.core.test_runtime import Session

SECRET = "pk-live-777"


class Host(Session):
    """A host agent session: each run appends a user turn, two tool calls, results, answer."""

    def __init__(self) -> None:
        super().__init__()
        self.seen_active: list[bool] = []
        self.attached: Any = None

    def run(self, turn: int, planted: str | None = None) -> str:
        if self.attached is not None:
            self.seen_active.append(self.attached.run_active)
        self.user(planted or f"Turn {turn}: please inspect module {turn % 17} and report")
        self.call(f"c{turn}a", "read_file", path=f"src/mod_{turn % 17}.py")
        listing = "\n".join(f"line {n}: value_{n} = compute({n}, {turn})" for n in range(24))
        self.result(f"c{turn}a", f"module {turn % 17} source:\n{listing}", name="read_file")
        self.call(f"c{turn}b", "run_tests", target=f"mod_{turn % 17}")
        self.result(f"c{turn}b", f"{turn % 5} tests failed in mod_{turn % 17}", name="run_tests")
        answer = f"Module {turn % 17} reviewed; {turn % 5} failing tests remain after turn {turn}."
        self.assistant(answer)
        return answer

    def stream(self, turn: int) -> Iterator[str]:
        yield from self.run(turn).split()


def om(**kw: Any) -> ObservationalMemory:
    settings = kw.pop(
        "settings",
        {
            "observation": {"messageTokens": 300},
            "reflection": {"observationTokens": 500},
            "context": {
                "observationsPoolMaxTokens": 800,
                "compactAfterTokens": 12_000,
                "recentMessages": 8,
            },
            "dropper": {"targetTokens": 400},
        },
    )
    return ObservationalMemory(
        settings, observation=WorkerConfig(provider=ExtractiveProvider()), **kw
    )


def attach(memory: ObservationalMemory, host: Host | None = None) -> Any:
    host = host or Host()
    attached = memory.attach(host, append_entry=host.append, session_model="extractive")
    host.attached = attached
    return attached


def test_construction_validates_the_gate() -> None:
    with pytest.raises(InvalidTriggerError):
        om(trigger={"type": "moon_phase"})
    with pytest.raises(InvalidTriggerError):
        om(should_compact="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidTriggerError):
        om(trigger={"type": "tokens", "tokens": 0})
    with pytest.raises(InvalidTriggerError):
        host = Host()
        om(trigger={"type": "input_ratio", "ratio": 0.5}).attach(host, append_entry=host.append)


def test_attach_starts_nothing_and_proxied_run_flushes_after_completion() -> None:
    host = Host()
    attached = attach(om(), host)
    assert host.entries == []
    assert attached.session.run(1).startswith("Module 1")
    assert host.seen_active == [True]  # the run was in flight while it ran
    assert attached.run_active is False
    assert attached.last_flush is not None
    assert attached.session.session_id == host.session_id  # other attributes pass through


def test_flush_during_a_proxied_run_skips_with_run_active() -> None:
    host = Host()
    attached = attach(om(), host)
    inner: list[Any] = []
    original = host.run

    def run_and_flush(turn: int) -> str:
        inner.append(attached.flush())
        return original(turn)

    host.run = run_and_flush  # type: ignore[method-assign]
    attached.session.run(1)
    assert inner[0].skipped[0].reason == "run_active"


def test_stream_flushes_after_exhaustion() -> None:
    host = Host()
    attached = attach(om(settings={"observation": {"messageTokens": 1}}), host)
    words = list(attached.session.stream(3))
    assert words and attached.last_flush is not None
    assert attached.last_flush.observation_ids


def test_should_compact_replaces_token_gate_and_raising_callback_decides_false() -> None:
    seen: list[tuple[int, int]] = []

    def gate(context: CompactionGateContext) -> bool:
        seen.append((context.entry_count, context.estimated_input_tokens))
        return context.entry_count >= 12

    host = Host()
    attached = attach(om(should_compact=gate), host)
    attached.session.run(1)
    attached.session.run(2)
    assert any(e.kind == "compaction" for e in host.entries)
    assert seen[0][0] == 6

    events: list[str] = []

    def needs_cap(context: CompactionGateContext) -> bool:
        return context.estimated_input_tokens / context.input_cap_tokens > 0.0

    host2 = Host()
    attached2 = attach(om(should_compact=needs_cap, debug=lambda e, d: events.append(e)), host2)
    attached2.session.run(1)
    assert not any(e.kind == "compaction" for e in host2.entries)
    assert events == ["observational-memory:compaction-trigger-error"]


def test_triggers() -> None:
    host = Host()
    attached = attach(om(trigger={"type": "entries", "entries": 6}), host)
    attached.session.run(1)
    assert host.entries[-1].kind == "compaction"
    host2 = Host()
    capped = om(trigger={"type": "input_ratio", "ratio": 0.5}).attach(
        host2, append_entry=host2.append, session_model="x", input_cap_tokens=50
    )
    capped.session.run(1)
    assert host2.entries[-1].kind == "compaction"


def test_context_provider_renders_two_blocks_redacted() -> None:
    host = Host()
    attached = attach(om(settings={"observation": {"messageTokens": 1}}, secrets=[SECRET]), host)
    attached.session.run(1, planted=f"Remember the deploy key {SECRET} for turn 1")
    memory, recent = attached.context_provider()
    assert (memory.id, recent.id) == ("observational-memory", "recent-messages")
    assert SECRET not in memory.text + recent.text
    assert recent.entry_ids


def _planted(turn: int) -> str:
    return f"Remember: the vault code for project P{turn} is V-{turn * 37}-X, never lose it."


def _context_tokens(blocks: Sequence[Any]) -> int:
    return sum(estimate_text_tokens(b.text) for b in blocks)


def test_long_tool_heavy_session_stays_under_caps_and_planted_facts_stay_recallable() -> None:
    host = Host()
    attached = attach(om(), host)
    planted: dict[str, str] = {}
    max_context = 0
    for turn in range(1, 301):
        if turn % 15 == 0:
            text = _planted(turn)
            attached.session.run(turn, planted=text)
            planted[
                next(e.id for e in reversed(host.entries) if e.message and e.message.text == text)
            ] = text
        else:
            attached.session.run(turn)
        flushed = attached.last_flush
        assert flushed is not None and flushed.error is None, flushed
        active = attached.runtime.ledger().active_observations
        assert observation_tokens(active) <= 800 + 400  # at most one observe pass over the cap
        memory, recent = attached.context_provider()
        assert len(memory.text.encode()) <= MAX_RENDERED_MEMORY_BYTES
        assert len(recent.text.encode()) <= MAX_RECENT_WINDOW_BYTES
        max_context = max(max_context, _context_tokens((memory, recent)))
    transcript_tokens = sum(estimate_entry_tokens(e) for e in host.entries if e.kind == "message")
    assert len([e for e in host.entries if e.kind == "message"]) == 1800
    assert any(e.kind == "compaction" for e in host.entries)
    assert fold_ledger(host.entries).reflections
    assert fold_ledger(host.entries).dropped_observation_ids
    assert max_context < transcript_tokens // 10
    _assert_recallable(host.entries, planted)


def _assert_recallable(entries: Sequence[SessionEntry], planted: dict[str, str]) -> None:
    everything = fold_ledger(entries, from_snapshot=False)
    assert len(planted) == 20
    for entry_id, text in planted.items():
        citing = [o.id for o in everything.observations if entry_id in o.source_entry_ids]
        assert citing, f"planted fact {entry_id} was never observed"
        result = recall_memory(entries, citing[0])
        assert result.found
        assert any(s.message is not None and s.message.text == text for s in result.sources)


def test_proxied_compact_flushes_afterwards_and_compaction_must_land_at_leaf() -> None:
    host = Host()
    attached = attach(om(settings={"observation": {"messageTokens": 1}}), host)
    host.run(1)  # not proxied: nothing observed yet
    calls: list[str] = []
    host.compact = lambda: calls.append("host")  # type: ignore[attr-defined]
    attached.session.compact()
    assert calls == ["host"] and attached.last_flush.observation_ids
    lost: list[SessionEntry] = []
    stray = om().attach(host, append_entry=lost.append, session_model="x")
    with pytest.raises(AppendNotVisibleError):
        stray.compact_now()
    assert lost and lost[0].kind == "compaction"
