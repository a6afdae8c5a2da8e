"""A memory plan fitted to many budgets answers exactly as fit's item-by-item search at each, and a
context built from a memory part kept across appends equals one built from scratch."""

from __future__ import annotations

import random

import pytest

from om_core.ledger.models import Observation, Reflection
from om_core.policy.redaction import normalize_secrets
from om_core.read.context import build_context, build_context_tail
from om_core.read.context_memory import ContextMemory
from om_core.read.memory_fit import Policy
from om_core.read.render import (
    MemoryPlan,
    ObservationLines,
    render_observational_memory,
    render_reachable_memory,
)
from om_core.settings import resolve_settings
from tests.core.builders import Branch, mid, obs, ref

SETTINGS = resolve_settings({"context": {"recentMessages": 3}})


def _memory(seed: int) -> tuple[list[Reflection], list[Observation]]:
    """Observations of varied length, relevance and date, some under reflections."""
    chance = random.Random(seed)
    observations = [
        Observation(
            id=mid(i),
            text=f"fact {i} " + "word " * chance.randint(0, 30),
            source_entry_ids=(f"e{i}",),
            relevance=chance.choice([0.1, 0.5, 0.9]),
            observed_at=f"2026-0{chance.randint(1, 3)}-0{chance.randint(1, 9)}T10:00:00Z",
        )
        for i in range(1, 120)
    ]
    reflections = [
        ref(1000 + r, *(o.id for o in chance.sample(observations, 8)), text=f"reflection {r}")
        for r in range(6)
    ]
    return reflections, observations


@pytest.mark.parametrize("policy", ["reachable", "count"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_drop_plan_answers_as_the_item_by_item_search_at_every_budget(
    policy: Policy, seed: int
) -> None:
    reflections, observations = _memory(seed)
    outline = ["scope a", "scope b: " + "detail " * 20]
    plan = MemoryPlan(reflections, observations, outline, ("word 3",), policy)
    whole = len(plan.fitted(10**9).text.encode("utf-8"))
    budgets = [whole, whole - 1, whole // 2, whole // 5, 900, 400, 120, 40, 0]
    budgets += random.Random(seed).sample(range(whole), 40)
    for budget in budgets:
        for page_from in (None, "entry-7", "ëntry-with-a-longer-id"):
            assert plan.fitted(budget, page_from) == plan.searched(budget, page_from), (
                budget,
                page_from,
            )


def test_the_render_functions_answer_as_the_search() -> None:
    reflections, observations = _memory(5)
    for budget in (10**9, 2_000, 300):
        plan = MemoryPlan(reflections, observations, None, (), "reachable")
        reachable = render_reachable_memory(
            reflections, observations, max_bytes=budget, page_from="e5"
        )
        assert reachable == plan.searched(budget, "e5")
        counted = MemoryPlan(reflections, observations, None, (), "count")
        text = render_observational_memory(reflections, observations, max_bytes=budget)
        assert text == counted.searched(budget).text


def test_the_note_unlists_the_oldest_ids_from_the_plan_as_the_search_does() -> None:
    reflections, observations = _memory(4)
    plan = MemoryPlan(reflections, observations, None, (), "reachable")
    squeezed = plan.fitted(600, "e5")
    assert squeezed.unlisted > 0
    assert "page messages backward from entry e5" in squeezed.text
    assert squeezed == plan.searched(600, "e5")


def _grown_session() -> Branch:
    branch = Branch()
    for i in range(1, 41):
        branch.user(f"question {i} " + "detail " * (i % 7))
        branch.assistant(f"answer {i}")
        if i % 10 == 0:
            seen = [e.id for e in branch.entries[-20:] if e.message is not None]
            branch.observe(
                *(obs(100 * i + k, source, relevance=0.3) for k, source in enumerate(seen)),
                covers=branch.entries[-1].id,
            )
    branch.reflect(ref(9000, mid(1000), mid(1001), text="early facts"))
    return branch


@pytest.mark.parametrize("max_tokens", [None, 256, 400, 2_000])
def test_a_context_from_a_kept_memory_part_equals_one_built_afresh(
    max_tokens: int | None,
) -> None:
    branch = _grown_session()
    secrets = ("detail",)
    memory = ContextMemory(branch.entries, (), secrets, {})
    for i in range(12):
        branch.user(f"late message {i} " + "x" * (i * 37))
        fresh = build_context(branch.entries, SETTINGS, (), secrets, max_tokens=max_tokens)
        kept = build_context_tail(branch.entries, memory, SETTINGS, max_tokens=max_tokens)
        assert kept == fresh


def test_prepared_lines_serve_secrets_of_equal_length_in_either_order() -> None:
    reflections, observations = _memory(6)
    keys = normalize_secrets(["word 1", "word 2"])
    lines = ObservationLines(observations, tuple(reversed(keys)))
    plan = MemoryPlan(reflections, observations, None, keys, "reachable", lines)
    alone = MemoryPlan(reflections, observations, None, keys, "reachable")
    assert plan.fitted(3_000) == alone.fitted(3_000)
    with pytest.raises(ValueError, match="other secrets"):
        MemoryPlan(reflections, observations, None, ("word 3",), "reachable", lines)


def _observed(*texts: str, secrets: tuple[str, ...] = ()) -> ContextMemory:
    """A memory of one observation per text (ids and times by position), as a store keeps."""
    branch = Branch()
    for n, text in enumerate(texts):
        source = branch.user(f"message {n}")
        observation = Observation(
            id=mid(n + 1),
            text=text,
            source_entry_ids=(source.id,),
            observed_at=f"2026-02-0{n % 9 + 1}T10:00:00Z",
        )
        branch.observe(observation, covers=source.id)
    return ContextMemory(branch.entries, (), secrets, {})


def _rebuilt(earlier: ContextMemory, *texts: str, secrets: tuple[str, ...] = ()) -> ContextMemory:
    fresh = _observed(*texts, secrets=secrets)
    return ContextMemory(
        [],
        (),
        secrets,
        {"ledger": fresh.ledger, "scope_map": None},
        earlier,
    )


def test_a_memory_built_on_an_earlier_version_renders_as_one_built_afresh() -> None:
    earlier = _observed("the lease ends in March", "the build is green")
    # Grown by one record, one text rewritten in place (an erasure's placeholder), and
    # one secret more: each line that changed is rendered anew, the rest is lent.
    cases = [
        (("the lease ends in March", "the build is green", "a third fact"), ()),
        (("[erased]", "the build is green"), ()),
        (("the lease ends in March", "the build is green"), ("lease",)),
    ]
    for texts, secrets in cases:
        grown = _rebuilt(earlier, *texts, secrets=secrets)
        alone = _observed(*texts, secrets=secrets)
        for budget in (None, 40, 90, 10_000):
            assert grown.render_reachable([], budget, None) == alone.render_reachable(
                [], budget, None
            )
    erased = _rebuilt(earlier, "[erased]", "the build is green").render([])
    assert "lease" not in erased and "[erased]" in erased
    redacted = _rebuilt(earlier, "the lease ends in March", secrets=("lease",)).render([])
    assert "lease" not in redacted
