"""Memory the budget leaves out of the memory block stays in reach: a rule per test."""

from __future__ import annotations

import random

import pytest

from om_core.ledger.fold import fold_ledger, is_eligible_observation_source
from om_core.ledger.models import Observation, SessionEntry
from om_core.ledger.tokens import estimate_text_tokens
from om_core.read.context import build_context
from om_core.read.memory_fit import count_note
from om_core.read.recall import recall_memory
from om_core.read.render import memory_refs, render_observational_memory, render_reachable_memory
from om_core.settings import resolve_settings
from tests.core.builders import Branch, mid, obs, ref

SETTINGS = resolve_settings({"context": {"recentMessages": 2}})
LONG = "a sentence long enough to take some room in the memory block " * 2


def sizes(text: str) -> int:
    return len(text.encode("utf-8"))


def test_observations_a_reflection_covers_are_left_out_at_any_budget() -> None:
    covered = [obs(i, f"e{i}", text=f"covered {i} {LONG}", relevance=0.9) for i in range(1, 5)]
    loose = [obs(i, f"e{i}", text=f"loose {i} {LONG}", relevance=0.1) for i in range(5, 9)]
    reflection = ref(20, *(o.id for o in covered), text="the four covered facts")
    whole = render_reachable_memory([reflection], [*covered, *loose])
    # The reflection stands for what it covers, high relevance or not; the rest all show.
    assert set(whole.omitted_ids) == {o.id for o in covered}
    assert all(f"[om:{o.id}]" in whole.text for o in loose)
    assert not any(f"[om:{o.id}]" in whole.text for o in covered)
    assert f"[reflection:{reflection.id}] the four covered facts" in whole.text
    assert whole.covered == len(covered) and whole.listed == 0
    assert "4 of them under a reflection shown or listed here" in whole.text
    # A tighter budget takes loose observations next, each listed by id.
    fitted = render_reachable_memory(
        [reflection], [*covered, *loose], max_bytes=sizes(whole.text) - 1
    )
    assert fitted.covered == len(covered) and fitted.listed == len(fitted.omitted_ids) - 4 > 0
    assert sizes(fitted.text) <= sizes(whole.text) - 1


def test_every_item_left_out_that_no_reflection_covers_is_listed_by_id() -> None:
    loose = [obs(i, f"e{i}", text=f"fact {i} {LONG}", relevance=i / 100) for i in range(1, 41)]
    old = ref(90, mid(1), text="an old reflection over fact 1")
    budget = 2_000
    fitted = render_reachable_memory([old], loose, max_bytes=budget)
    assert sizes(fitted.text) <= budget
    listed = set(memory_refs(fitted.text.rsplit("\n", 1)[-1]))
    shown = {line.split("]")[0][3:] for line in fitted.text.splitlines() if line.startswith("- [")}
    for o in loose:
        # Shown, listed by id, or under the reflection (itself shown or listed).
        assert f"om:{o.id}" in shown or f"om:{o.id}" in listed or o.id == mid(1)
    assert fitted.listed == len(listed) and fitted.unlisted == 0
    # render_observational_memory's own note for the same memory only counts what it left out.
    counted = render_observational_memory([old], loose, max_bytes=budget)
    assert counted.endswith(count_note(len(loose) + 1 - counted.count("\n- [")))
    assert not memory_refs(counted.rsplit("\n", 1)[-1])


def test_ids_that_do_not_fit_leave_a_cursor_to_page_back_from() -> None:
    loose = [obs(i, f"e{i}", text=f"fact {i} {LONG}") for i in range(1, 200)]
    fitted = render_reachable_memory([], loose, max_bytes=600, page_from="e500")
    assert sizes(fitted.text) <= 600
    assert fitted.unlisted and fitted.listed + fitted.unlisted == len(loose)
    assert "older ones not listed: page messages backward from entry e500" in fitted.text
    # The newest stay listed; the oldest went behind the cursor first.
    assert f"[om:{mid(199)}]" in fitted.text and f"[om:{mid(1)}]" not in fitted.text


def test_an_unlisted_reflection_takes_the_observations_under_it_behind_the_cursor() -> None:
    under = [obs(i, f"e{i}", text=f"fact {i} {LONG}") for i in range(1, 60)]
    reflection = ref(90, *(o.id for o in under), text="all of them " + LONG)
    fitted = render_reachable_memory([reflection], under, max_bytes=150, page_from="e900")
    assert fitted.listed == 0 and fitted.covered == 0
    assert fitted.unlisted == len(under) + 1
    assert "page messages backward from entry e900" in fitted.text


def test_a_date_is_written_once_for_a_run_of_the_same_time() -> None:
    same = "2023-05-08T13:56:00Z"
    items = [
        Observation(id=mid(i), text=f"fact {i}", source_entry_ids=("e1",), observed_at=same)
        for i in range(1, 4)
    ]
    later = Observation(
        id=mid(4), text="fact 4", source_entry_ids=("e2",), observed_at="2023-05-09T09:30:00Z"
    )
    lines = render_observational_memory([], [*items, later]).splitlines()[3:]
    assert lines == [
        f"- [om:{mid(1)}] (8 May 2023, 13:56 UTC) fact 1",
        f"- [om:{mid(2)}] fact 2",
        f"- [om:{mid(3)}] fact 3",
        f"- [om:{mid(4)}] (9 May 2023, 09:30 UTC) fact 4",
    ]
    # Leaving out a run's first line moves its date to the next line kept.
    low = items[0].model_copy(update={"relevance": 0.0, "text": LONG})
    full = render_observational_memory([], [low, *items[1:], later])
    cut = render_observational_memory([], [low, *items[1:], later], max_bytes=sizes(full) - 1)
    assert f"- [om:{mid(2)}] (8 May 2023, 13:56 UTC) fact 2" in cut.splitlines()
    assert f"[om:{mid(1)}]" not in cut and sizes(cut) < sizes(full)


@pytest.mark.parametrize("seed", range(6))
def test_the_byte_account_is_exact_at_every_budget(seed: int) -> None:
    rnd = random.Random(seed)
    days = ["2023-05-08T13:56:00Z", "2023-05-08T14:00:00Z", "2023-05-09T09:30:00Z", None]
    observations = [
        Observation(
            id=mid(i),
            text=f"fact {i} " + "é" * rnd.randint(1, 30),
            source_entry_ids=(f"e{i}",),
            relevance=rnd.random(),
            observed_at=rnd.choice(days),
        )
        for i in range(1, 30)
    ]
    reflections = [ref(100 + i, mid(i), mid(i + 1), text=f"r{i} " * 3) for i in range(1, 12, 3)]
    full = render_reachable_memory(reflections, observations, ["- task:a"]).text
    covered = {oid for r in reflections for oid in r.observation_ids}
    whole = render_reachable_memory(reflections, observations, ["- task:a"])
    assert set(whole.omitted_ids) == covered and whole.listed == 0
    for budget in range(sizes(full), 200, -7):
        reachable = render_reachable_memory(
            reflections, observations, ["- task:a"], max_bytes=budget
        ).text
        counted = render_observational_memory(
            reflections, observations, ["- task:a"], max_bytes=budget
        )
        assert sizes(reachable) <= budget and sizes(counted) <= budget, budget


def long_session(rnd: random.Random, messages: int) -> Branch:
    """A branch whose memory outgrows a small budget: observations of every message in
    batches, a reflection over some batches, and a few messages no observer read yet."""
    b = Branch()
    batch: list[tuple[SessionEntry, str]] = []
    n = 0
    for i in range(messages):
        code = f"C{i:04d}"
        entry = b.user(f"message {i} says code {code} " + "filler " * rnd.randint(2, 12))
        batch.append((entry, code))
        if len(batch) == 10:
            observed = [
                Observation(
                    id=mid(n + j + 1),
                    text=f"observed code {code}",
                    source_entry_ids=(entry.id,),
                    relevance=rnd.random(),
                )
                for j, (entry, code) in enumerate(batch)
            ]
            n += len(observed)
            b.observe(*observed, covers=batch[-1][0].id)
            if rnd.random() < 0.4:
                b.reflect(ref(10_000 + n, *(o.id for o in observed), text="a batch of codes"))
            batch = []
    return b


@pytest.mark.parametrize("seed", range(4))
def test_every_message_is_shown_or_one_recall_away_at_any_budget(seed: int) -> None:
    rnd = random.Random(seed)
    b = long_session(rnd, 300)
    ledger = fold_ledger(b.entries)
    messages = [e.id for e in b.entries if is_eligible_observation_source(e)]
    for budget in (256, 700, 1_500, 4_000, None):
        context = build_context(b.entries, SETTINGS, ledger=ledger, max_tokens=budget)
        reachable = set(context.recent.entry_ids or ())
        for memory_id in memory_refs(context.memory.text):
            result = recall_memory(b.entries, memory_id, ledger=ledger)
            reachable |= {e.id for e in result.sources}
        missing = [m for m in messages if m not in reachable]
        omitted = context.omitted
        if omitted is None or not omitted.unlisted:
            assert missing == [], (budget, missing[:5])
        else:
            # Only a budget too small for the ids themselves pages instead, from the oldest
            # message the recent block shows.
            cursor = context.recent.entry_ids[0]  # type: ignore[index]
            assert f"page messages backward from entry {cursor}" in context.memory.text
            assert all(messages.index(m) < messages.index(cursor) for m in missing)
        if budget is not None:
            total = estimate_text_tokens(context.memory.text)
            total += estimate_text_tokens(context.recent.text)
            assert total <= budget


def test_context_reports_memory_left_out_and_what_no_reflection_went_over() -> None:
    b = long_session(random.Random(1), 300)
    ledger = fold_ledger(b.entries)
    context = build_context(b.entries, SETTINGS, ledger=ledger, max_tokens=1_500)
    omitted = context.omitted
    assert omitted is not None and omitted.items > 0
    # Each item left out is exactly one of: under a reflection, listed, behind the cursor.
    assert omitted.items == omitted.covered + omitted.listed + omitted.unlisted
    pending = set(ledger.pending_reflection_observation_ids)
    recent = set(context.recent.entry_ids or ())
    left_out = [
        o
        for o in ledger.active_observations
        if f"- [om:{o.id}]" not in context.memory.text
        and not recent.issuperset(o.source_entry_ids)  # shown verbatim instead
    ]
    assert len(left_out) <= omitted.items
    assert pending and omitted.unreflected == sum(1 for o in left_out if o.id in pending) > 0
    # Unbudgeted, only the observations a reflection stands for are left out.
    whole = build_context(b.entries, SETTINGS, ledger=ledger).omitted
    reflected = {oid for r in ledger.reflections for oid in r.observation_ids}
    assert whole is not None and whole.items == whole.covered == len(reflected)
