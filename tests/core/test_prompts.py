"""Prompts a model can work with: source-dated observations, candidate reflections, a dated
memory block in time order, and the version a runtime runs with."""

from __future__ import annotations

from typing import Any

import pytest

from om_core.errors import WorkerOutputRejectedError
from om_core.flush.prompts import (
    CUSTOM_PROMPTS_VERSION,
    DEFAULT_PROMPTS,
    OBSERVER_VERSION,
    REFLECTOR_INSTRUCTIONS,
    REFLECTOR_VERSION,
    PromptSet,
)
from om_core.flush.provider import ScriptedProvider
from om_core.flush.runtime import ObservationalMemoryRuntime
from om_core.flush.workers import run_observer, run_reflector
from om_core.flush.workers.observer import observer_prompt
from om_core.flush.workers.protocol import parse_block
from om_core.flush.workers.reflector import best_candidates
from om_core.ledger.models import Message, Observation, ToolCall
from om_core.policy.limits import WorkerLimits
from om_core.read.render import format_time, in_time_order, render_observational_memory
from tests.core.builders import Branch, mid

LIMITS = WorkerLimits()
RUN_TIME = "2023-06-01T00:00:00Z"


def calls(name: str, *argument_sets: dict[str, Any]) -> Message:
    return Message(
        role="assistant",
        tool_calls=tuple(
            ToolCall(id=f"c{i}", name=name, arguments=a) for i, a in enumerate(argument_sets)
        ),
    )


def timed_branch(*texts_and_times: tuple[str, str | None]) -> Branch:
    b = Branch()
    for text, time in texts_and_times:
        b.user(text)
        b.entries[-1] = b.entries[-1].model_copy(update={"created_at": time})
    return b


def dated(n: int, when: str | None, text: str | None = None, tokens: int = 10) -> Observation:
    return Observation(
        id=mid(n),
        text=text or f"{n:02d}" + "x" * (tokens * 4 - 2),
        source_entry_ids=(f"e{n}",),
        observed_at=when,
    )


def test_default_version_names_both_prompts() -> None:
    assert DEFAULT_PROMPTS.version == f"{OBSERVER_VERSION}/{REFLECTOR_VERSION}"
    assert DEFAULT_PROMPTS.reflector == REFLECTOR_INSTRUCTIONS


def test_observation_is_dated_by_its_latest_source_not_by_the_run() -> None:
    b = timed_branch(
        ("The launch moved to Friday.", "2023-05-08T13:56:00Z"),
        ("Confirmed: launch on Friday 12 May.", "2023-05-09T09:00:00+00:00"),
        ("No time on this one.", None),
    )
    args = [
        {"text": "Launch is Friday 12 May.", "sourceEntryIds": ["e2", "e1"]},
        {"text": "Something undated.", "sourceEntryIds": ["e3"]},
    ]
    record = run_observer(
        ScriptedProvider([calls("record_observation", *args)], then_stop=True),
        b.entries,
        session_id="s1",
        model="m",
        limits=LIMITS,
        observed_at=RUN_TIME,
    )
    first, second = record.observations
    assert first.observed_at == "2023-05-09T09:00:00+00:00"  # the later source
    assert second.observed_at == RUN_TIME  # sources without a time: the run's time


def test_observer_prompt_states_the_span_of_the_batch() -> None:
    b = timed_branch(("late", "2023-05-09T10:00:00Z"), ("early", "2023-05-08T10:00:00Z"))
    prompt = observer_prompt(b.entries)
    assert prompt.splitlines()[0] == (
        "Batch: 2 messages, from 2023-05-08T10:00:00Z to 2023-05-09T10:00:00Z."
    )
    assert [line["time"] for line in parse_block(prompt, "transcript")] == [
        "2023-05-09T10:00:00Z",
        "2023-05-08T10:00:00Z",
    ]


def reflect(script: list[Any], window: list[Observation]) -> tuple[Any, ScriptedProvider]:
    provider = ScriptedProvider(script, then_stop=True)
    record = run_reflector(provider, window, session_id="s1", model="m", limits=LIMITS)
    return record, provider


WINDOW = [dated(1, "2023-05-08T10:00:00Z"), dated(2, "2023-05-09T10:00:00Z")]


def test_reflector_refuses_a_longer_candidate_and_keeps_the_shorter_retry() -> None:
    too_long = {"text": "y" * 200, "observationIds": [mid(1), mid(2)]}
    short = {"text": "Both facts, short.", "observationIds": [mid(1), mid(2)]}
    record, provider = reflect(
        [calls("record_reflection", too_long), calls("record_reflection", short)], WINDOW
    )
    assert [r.text for r in record.reflections] == ["Both facts, short."]
    # The model was told why its first attempt was not kept.
    refused = provider.requests[1].messages[-1]
    assert refused.role == "tool" and "not kept" in refused.text and "shorter" in refused.text
    # Its prompt carried each observation's time.
    lines = parse_block(provider.requests[0].messages[1].text, "observations")
    assert [line["time"] for line in lines] == ["2023-05-08T10:00:00Z", "2023-05-09T10:00:00Z"]


def test_reflector_keeps_the_shorter_of_two_candidates_over_the_same_observations() -> None:
    ids = [mid(1), mid(2)]
    first = {"text": "A somewhat longer summary of both.", "observationIds": ids}
    second = {"text": "Short summary.", "observationIds": ids}
    third = {"text": "An even longer summary of both facts here.", "observationIds": ids}
    record, _ = reflect([calls("record_reflection", first, second, third)], WINDOW)
    assert [r.text for r in record.reflections] == ["Short summary."]


def test_reflector_never_commits_an_empty_set() -> None:
    with pytest.raises(WorkerOutputRejectedError, match="empty reflection set"):
        reflect([calls("record_reflection", {"text": "z" * 400, "observationIds": [mid(1)]})],
                WINDOW)  # fmt: skip


def test_best_candidates_leave_out_the_least_saving_until_the_set_shrinks_memory() -> None:
    from om_core.ledger.models import Reflection

    citable = {o.id: o for o in WINDOW}  # 10 tokens each
    a = Reflection(id=mid(10), text="a" * 32, observation_ids=(mid(1), mid(2)))  # 8 of 20
    b = Reflection(id=mid(11), text="b" * 36, observation_ids=(mid(1),))  # 9 of 10
    c = Reflection(id=mid(12), text="c" * 16, observation_ids=(mid(2),))  # 4 of 10
    # Together 21 tokens for 20: b saves least and goes; a and c (12 for 20) stay, in order.
    assert best_candidates([a, b, c], citable) == [a, c]
    assert best_candidates([], citable) == []


def test_memory_block_lists_observations_in_time_order_with_their_dates() -> None:
    later = dated(1, "2023-05-09T09:30:00Z", "User stated the deadline is now 12 May 2023.")
    earlier = dated(2, "2023-05-08T00:00:00Z", "User stated the deadline is 5 May 2023.")
    undated = dated(3, None, "An observation from before sources carried times.")
    text = render_observational_memory([], [later, earlier, undated])
    assert text.splitlines()[3:] == [
        f"- [om:{mid(3)}] An observation from before sources carried times.",
        f"- [om:{mid(2)}] (8 May 2023) User stated the deadline is 5 May 2023.",
        f"- [om:{mid(1)}] (9 May 2023, 09:30 UTC) User stated the deadline is now 12 May 2023.",
    ]


def test_time_order_compares_instants_and_is_stable() -> None:
    a = dated(1, "2023-05-08T12:00:00+02:00")  # 10:00 UTC
    b = dated(2, "2023-05-08T11:00:00Z")
    c = dated(3, "2023-05-08T11:00:00Z")
    assert [o.id for o in in_time_order([b, a, c])] == [mid(1), mid(2), mid(3)]
    assert format_time("2023-05-08T12:00:00+02:00") == "8 May 2023, 12:00 +02:00"
    assert format_time("not a time") is None


def test_runtime_reports_its_prompt_version() -> None:
    b = Branch()
    ours = PromptSet("ours-1", "Observe.", "Reflect.")
    runtime = ObservationalMemoryRuntime(b, append_entry=b.entries.append, prompts=ours)
    assert runtime.prompt_version == "ours-1"
    default = ObservationalMemoryRuntime(b, append_entry=b.entries.append)
    assert default.prompt_version == DEFAULT_PROMPTS.version
    custom = ObservationalMemoryRuntime(
        b, append_entry=b.entries.append, settings={"reflection": {"instructions": "Mine."}}
    )
    assert custom.prompt_version == CUSTOM_PROMPTS_VERSION
