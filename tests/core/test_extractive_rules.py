"""The extractive observer's rules, each through the real observer loop: coverage without holes,
salient sentences wherever they are, relative dates anchored, call and text budgets kept."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from om_core.flush.extractive import OBSERVATION_CHARS, ExtractiveProvider, _has_identifier
from om_core.flush.workers import run_observer, run_reflector
from om_core.flush.workers.observer import observer_prompt
from om_core.ledger.models import Observation, SessionEntry
from om_core.ledger.tokens import estimate_text_tokens
from om_core.policy.limits import WorkerLimits
from tests.core.builders import Branch

MONDAY = "2023-05-08T13:56:00.000Z"  # a Monday


def observe(
    entries: Sequence[SessionEntry], limits: WorkerLimits | None = None
) -> list[Observation]:
    record = run_observer(
        ExtractiveProvider(), entries, session_id="s", model="x", limits=limits or WorkerLimits()
    )
    return list(record.observations)


def cited(observations: Sequence[Observation]) -> set[str]:
    return {source for o in observations for source in o.source_entry_ids}


def timed(b: Branch, time: str) -> None:
    """Stamp the branch's last entry with ``time`` (Branch builds entries without one)."""
    b.entries[-1] = b.entries[-1].model_copy(update={"created_at": time})


def test_duplicate_openers_and_acknowledgements_are_cited_without_noise() -> None:
    b = Branch()
    b.user("Hey Dave!")  # e1: small talk before any fact: cited by the next observation
    b.user("Hey Dave! I moved the standup to 10:30 on Tuesdays.")  # e2
    b.assistant("Thanks! I will update the team calendar for everyone.")  # e3: same opener
    b.user("Thanks!")  # e4
    b.assistant("Thanks!")  # e5
    b.user("Thanks! The release branch is cut from main every Friday.")  # e6
    observations = observe(b.entries)
    assert cited(observations) == {e.id for e in b.entries}
    texts = [o.text for o in observations]
    assert not any(t.split(": ", 1)[-1].strip() in {"Thanks!", "Hey Dave!"} for t in texts)
    assert len(observations) == 3  # e2, e3, e6: acknowledgements add sources, not records
    assert observations[0].source_entry_ids == ("e1", "e2")
    assert observations[1].source_entry_ids == ("e3", "e4", "e5")
    assert "10:30 on Tuesdays" in texts[0]
    assert "update the team calendar" in texts[1]
    assert "cut from main every Friday" in texts[2]


def test_exact_repeat_is_cited_by_the_first_observation_not_observed_again() -> None:
    b = Branch()
    b.user("Our staging cluster runs Kubernetes 1.29 on three nodes.")  # e1
    b.assistant("Understood, I will target that cluster for the rollout.")  # e2
    b.user("our  staging cluster runs Kubernetes 1.29 on three nodes.")  # e3: same, normalized
    observations = observe(b.entries)
    assert [o.source_entry_ids for o in observations] == [("e1", "e3"), ("e2",)]


def test_batch_of_only_small_talk_gets_one_short_observation() -> None:
    b = Branch()
    b.user("Hey Dave!")
    b.assistant("ok")
    b.user("Thanks!")
    observations = observe(b.entries)
    assert len(observations) == 1
    assert observations[0].source_entry_ids == ("e1", "e2", "e3")
    assert observations[0].text == "User and assistant made small talk."
    assert observations[0].relevance < 0.5


def test_fact_on_third_tool_line_and_after_short_opener_reach_memory() -> None:
    b = Branch()
    b.call("c1", "query_inventory", service="billing")
    b.result("c1", "connected\nscanning replicas\ndb-billing-03.internal port 5433\ndone", "query")
    b.user("Hey! By the way, my sister moved to Lisbon in 2021.")
    texts = [o.text for o in observe(b.entries)]
    assert texts[1] == "Tool query: db-billing-03.internal port 5433"
    assert texts[2] == "User: By the way, my sister moved to Lisbon in 2021."


def test_salient_sentences_are_kept_in_order_after_the_first() -> None:
    b = Branch()
    b.user(
        "I spent the afternoon cleaning up the garage. It was dusty. The new config lives in "
        "/etc/app/settings.toml now. Nothing else happened. I prefer tabs over spaces."
    )
    (observation,) = observe(b.entries)
    assert observation.text == (
        "User: I spent the afternoon cleaning up the garage. The new config lives in "
        "/etc/app/settings.toml now. I prefer tabs over spaces."
    )


def test_relative_dates_are_anchored_to_the_message_time() -> None:
    b = Branch()
    b.user("We shipped the beta last week and the hotfix yesterday.")
    timed(b, MONDAY)
    b.user("The demo is tomorrow and the launch is next Friday.")
    timed(b, MONDAY)
    b.user("I started the migration two weeks ago, after the audit last month.")
    timed(b, MONDAY)
    b.user("We moved offices last year, the day before yesterday was the party.")
    timed(b, MONDAY)
    b.user("During the last week the pipeline was flaky.")  # a span, not a date
    timed(b, MONDAY)
    texts = [o.text for o in observe(b.entries)]
    assert texts == [
        "User: We shipped the beta last week [week of 1 May 2023] and the hotfix yesterday "
        "[7 May 2023].",
        "User: The demo is tomorrow [9 May 2023] and the launch is next Friday [12 May 2023].",
        "User: I started the migration two weeks ago [24 April 2023], after the audit last month "
        "[April 2023].",
        "User: We moved offices last year [2022], the day before yesterday [6 May 2023] was the "
        "party.",
        "User: During the last week the pipeline was flaky.",
    ]


def test_relative_dates_stay_unanchored_without_a_time() -> None:
    b = Branch()
    b.user("We shipped the beta last week and the hotfix yesterday.")
    b.user("The launch is next Friday, two weeks ago we froze the scope.")
    timed(b, "not a time")  # unparseable: nothing to compute from, so nothing is invented
    texts = [o.text for o in observe(b.entries)]
    assert texts == [
        "User: We shipped the beta last week and the hotfix yesterday.",
        "User: The launch is next Friday, two weeks ago we froze the scope.",
    ]


def test_transcript_lines_carry_the_entry_time_before_the_text() -> None:
    b = Branch()
    b.result("c1", "ok", name="deploy")
    timed(b, MONDAY)
    b.user("no time here")
    prompt = observer_prompt(b.entries)
    assert f'{{"id":"e1","role":"tool","tool":"deploy","time":"{MONDAY}","text":"ok"}}' in prompt
    assert '{"id":"e2","role":"user","text":"no time here"}' in prompt


def test_tiny_call_budget_merges_observations_and_still_cites_every_message() -> None:
    b = Branch()
    for i in range(30):
        if i % 4 == 3:
            b.assistant("Thanks!")
        else:
            b.user(f"Order {i} ships from depot_{i % 5} on day {i + 1} with {i * 2} boxes.")
    limits = WorkerLimits(max_turns=1, max_tool_calls_per_turn=2, max_tool_calls=2)
    observations = observe(b.entries, limits)
    assert len(observations) == 2
    assert cited(observations) == {e.id for e in b.entries}
    assert all(len(o.text) <= OBSERVATION_CHARS for o in observations)
    assert all(" | " in o.text for o in observations)  # neighbours' texts joined while room lasts


def test_per_observation_budget_is_respected() -> None:
    b = Branch()
    padding = "and keeps serving requests from the internal load balancer pool"
    b.user(" ".join(f"Server node-{i} listens on port {8000 + i} {padding}." for i in range(6)))
    b.user("The invoice id is " + "INV-" + "7" * 900 + " and it is unpaid.")
    b.result("c1", "\n".join(f"line {n}: value_{n} = {n * 7}" for n in range(200)), "dump")
    observations = observe(b.entries)
    assert len(observations) == 3
    assert all(len(o.text) <= OBSERVATION_CHARS for o in observations)
    assert observations[0].text.count("Server node-") == 3  # a fourth would not fit
    assert "node-0" in observations[0].text and "node-2" in observations[0].text
    assert observations[1].text.startswith("User: The invoice id is INV-7777")
    assert observations[1].text.endswith("7…")  # a blob too long for a word cut is cut inside
    assert observations[2].text.startswith("Tool dump: line 0: value_0 = 0; line 1: value_1 = 7")


def test_quoted_prompt_delimiters_do_not_get_the_record_rejected() -> None:
    b = Branch()
    b.user("The template ends with </transcript> and then <observations> starts, see v2.")
    (observation,) = observe(b.entries)
    assert "</transcript>" not in observation.text and "‹/transcript›" in observation.text


def test_reflections_over_richer_observations_stay_smaller() -> None:
    b = Branch()
    for i in range(12):
        b.user(f"Ticket T-{i} is blocked. Owner is Priya. ETA is {i + 1} May. Status: open.")
        b.result("c", f"build {i}\nartifact pkg-{i}.tar.gz\nsha 9f{i:02d}abc1234\n", "ci")
    observations = observe(b.entries)
    record = run_reflector(
        ExtractiveProvider(), observations, session_id="s", model="x", limits=WorkerLimits()
    )
    by_id = {o.id: o for o in observations}
    assert record.reflections
    for reflection in record.reflections:
        replaced = sum(estimate_text_tokens(by_id[i].text) for i in reflection.observation_ids)
        assert estimate_text_tokens(reflection.text) < replaced


# The identifier pattern as one alternation, before each kind was looked for behind its mark.
_ONE_PATTERN = re.compile(
    r"https?://\S+|[\w.+-]+@[\w-]+\.\w+"
    r"|\b\w+(?:_\w+)+\b"
    r"|\b[\w-]+(?:\.[\w-]+)*\.[A-Za-z][\w-]*\b"
    r"|(?<![\w/])~?/[\w.-]+"
    r"|\b[0-9a-f]{7,}\b|\b[\w.-]+=\S"
)
_MARKS_AND_WORDS = st.text(alphabet="abcdefxyzABQ019 ._-@/~=:+ésh\tp\n", max_size=60)


@settings(max_examples=400, deadline=None)
@given(_MARKS_AND_WORDS)
def test_identifiers_are_found_exactly_where_the_one_pattern_finds_them(text: str) -> None:
    assert _has_identifier(text) == (_ONE_PATTERN.search(text) is not None)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("see https://example.org/a", True),
        ("mail ops@example.org today", True),
        ("set max_retries higher", True),
        ("open config.yaml first", True),
        ("under ~/projects now", True),
        ("commit deadbeef landed", True),
        ("run with debug=true", True),
        ("the end. A new sentence", False),
        ("build log: step ok; build log: step ok;", False),
    ],
)
def test_each_kind_of_identifier_is_found(text: str, found: bool) -> None:
    assert _has_identifier(text) is found
