"""The offline extractive provider speaks the worker protocol through the real loops."""

from __future__ import annotations

from om_core.flush.extractive import ExtractiveProvider, relevance_of, summarize
from om_core.flush.provider import ProviderRequest
from om_core.flush.workers import run_dropper, run_observer, run_reflector
from om_core.ledger.models import Observation
from om_core.ledger.tokens import estimate_text_tokens
from om_core.policy.limits import WorkerLimits
from tests.core.builders import Branch, mid


def session() -> Branch:
    b = Branch()
    b.user("Remember that the deploy deadline is Friday 14:00 UTC.")  # e1
    b.assistant("ok")  # e2: an acknowledgement, cited by the previous observation
    b.call("c1", "read_file", path="config.yaml")  # e3
    b.result("c1", "database host is db-7.internal and the port is 5432", name="read_file")  # e4
    b.user("Remember that the deploy deadline is Friday 14:00 UTC.")  # e5: repeat, cited by e1's
    return b


def test_one_observation_per_substantive_novel_message_and_every_message_cited() -> None:
    record = run_observer(
        ExtractiveProvider(),
        session().entries,
        session_id="s",
        model="extractive",
        limits=WorkerLimits(),
    )
    cited = [o.source_entry_ids for o in record.observations]
    assert cited == [("e1", "e2", "e5"), ("e3",), ("e4",)]
    texts = [o.text for o in record.observations]
    assert texts[0].startswith("User: Remember that the deploy deadline")
    assert texts[2].startswith("Tool read_file: database host")
    assert all(0 <= o.relevance <= 1 for o in record.observations)
    assert record.covers_up_to_id == "e5"


def test_deterministic_and_respects_announced_limits() -> None:
    b = Branch()
    for i in range(30):
        b.user(f"Fact number {i}: the value of item {i} is {i * 3} units")
    limits = WorkerLimits(max_turns=2, max_tool_calls_per_turn=4, max_tool_calls=7)
    first = run_observer(ExtractiveProvider(), b.entries, session_id="s", model="x", limits=limits)
    second = run_observer(ExtractiveProvider(), b.entries, session_id="s", model="x", limits=limits)
    assert len(first.observations) == 7  # min(total, turns x per turn)
    cited = {source for o in first.observations for source in o.source_entry_ids}
    assert cited == {e.id for e in b.entries}  # merged into neighbours, not dropped
    assert [o.text for o in first.observations] == [o.text for o in second.observations]


def test_reflections_group_and_are_smaller() -> None:
    window = [
        Observation(
            id=mid(i),
            text=f"User: observation number {i} about the deploy plan",
            source_entry_ids=("e1",),
        )
        for i in range(1, 10)
    ]
    record = run_reflector(
        ExtractiveProvider(), window, session_id="s", model="x", limits=WorkerLimits()
    )
    assert [len(r.observation_ids) for r in record.reflections] == [6, 3]
    for reflection in record.reflections:
        cited = sum(
            estimate_text_tokens(window[int(i, 16) - 1].text) for i in reflection.observation_ids
        )
        assert estimate_text_tokens(reflection.text) < cited


def test_drops_lowest_relevance_down_to_target() -> None:
    pool = [
        Observation(id=mid(i), text="x" * 40, source_entry_ids=("e1",), relevance=r)
        for i, r in enumerate([0.9, 0.2, 0.5, 0.1], start=1)
    ]
    record = run_dropper(
        ExtractiveProvider(),
        pool,
        target_tokens=20,
        session_id="s",
        model="x",
        limits=WorkerLimits(),
    )
    assert record is not None and record.observation_ids == (mid(4), mid(2))


def test_heuristics_and_unknown_tools() -> None:
    assert summarize("First sentence. Second one.") == "First sentence."
    assert summarize("word " * 100, 20).endswith("…")
    assert relevance_of("user", "we decided on port 5432") > relevance_of("tool", "done and fine")
    request = ProviderRequest(messages=(), model="x", correlation_id="om:s")
    assert ExtractiveProvider().generate(request).message.tool_calls == ()


def test_one_provider_serves_runs_in_turn_each_from_its_own_plan() -> None:
    """The plan kept for a run's later turns never answers another run."""
    provider = ExtractiveProvider()
    limits = WorkerLimits(max_turns=4, max_tool_calls_per_turn=2)
    runs = []
    for n in (3, 5, 3):
        b = Branch()
        for i in range(n):
            b.user(f"Fact number {i} of {n}: the value of item {i} is {i * 7} units")
        runs.append(
            (b, run_observer(provider, b.entries, session_id="s", model="x", limits=limits))
        )
    for b, record in runs:
        alone = run_observer(
            ExtractiveProvider(), b.entries, session_id="s", model="x", limits=limits
        )
        assert [o.text for o in record.observations] == [o.text for o in alone.observations]
        assert [o.source_entry_ids for o in record.observations] == [(e.id,) for e in b.entries]
