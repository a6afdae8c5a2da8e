"""The metric definitions as pure functions, on hand-written texts and contexts."""

from __future__ import annotations

import pytest

from om_api.evaluation import normalize
from om_api.evaluation.grounding import (
    MemoryItem,
    Recalled,
    ShownContext,
    grounded_answer,
    out_of_reach,
    parse_memory_items,
    reached,
    shown_context,
    split_recent,
    ungrounded_answer,
)
from om_api.evaluation.scoring import (
    answer_in_context,
    answer_status,
    evidence_one_hop,
    is_yes_no,
    memory_refs,
    spread,
)

OBS_A, OBS_B, REF = "om:0123456789ab", "om:00000000000b", "reflection:ba9876543210"


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("7 May 2023", "7 may 2023"),
        ("May 7, 2023", "7 may 2023"),
        ("on the 7th of May, 2023!", "on 7 may 2023"),
        ("2023-05-07", "7 may 2023"),
        ("Sept. 3rd, 2022", "3 september 2022"),
        ("19 January, 2023", "19 january 2023"),
        ("Two kids", "2 kids"),
        ("Mel's dog", "mels dog"),
        ("The Grand Canyon", "grand canyon"),
        ("an apple, a pear", "apple pear"),
        ("  Lots   of\nspace ", "lots of space"),
        ("May I?", "may i"),
    ],
)
def test_normalize(text: str, normal: str) -> None:
    assert normalize(text) == normal


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        ("Yes", "yes_no"),
        ("no.", "yes_no"),
        ("Likely no", "yes_no"),
        ("Yes, she is supportive", "yes_no"),
        ("LIkely no; though she likes reading", "yes_no"),
        ("Nope", "yes_no"),
        ("No kids", "scored"),  # "no" opening a noun phrase is an answer, not a verdict
        ("Norway", "scored"),
        ("3", "small_number"),
        ("two", "small_number"),
        ("31", "small_number"),
        ("32", "scored"),
        ("2022", "scored"),
        ("3 times", "scored"),
        ("7 May 2023", "scored"),
        ("she went there twice with her whole family", "long"),
        (None, "no_answer"),
        ("  ", "no_answer"),
    ],
)
def test_answer_status(answer: str | None, status: str) -> None:
    assert answer_status(answer) == status


def test_yes_no_is_about_the_raw_answer() -> None:
    assert is_yes_no("Probably yes!") and is_yes_no("yeah")
    assert not is_yes_no("Yesterday") and not is_yes_no("Nobody")


def test_ungrounded_match_and_refs() -> None:
    context = normalize("- [om:0123456789ab] User: we moved to New York on May 7, 2023 with cats")
    assert answer_in_context("7 May 2023", context) is True
    assert answer_in_context("New York", context) is True
    assert answer_in_context("York City", context) is False
    assert answer_in_context("cat", context) is False  # word boundaries, not substrings
    assert answer_in_context("one two three four five six", context) is None  # too long
    assert answer_in_context("Yes", context) is None  # yes/no: left out
    assert answer_in_context("7", context) is None  # would match the date's day
    assert answer_in_context(None, context) is None
    assert memory_refs(f"[{OBS_A}] x [{REF}] [{OBS_A}]") == [OBS_A, REF]
    assert evidence_one_hop(["a", "b"], frozenset({"a", "b"})) is True
    assert evidence_one_hop(["a", "c"], frozenset({"a", "b"})) is False
    assert evidence_one_hop([], frozenset({"a"})) is None


def test_parse_memory_items() -> None:
    block = "\n".join(
        [
            "# Observational memory",
            "",
            "## Reflections",
            f"- [{REF}] Ana has a dog",
            "  and a cat",
            "",
            "## Observations",
            f"- [{OBS_A}] User: I moved to Lisbon.",
            f"- [{OBS_B}] Tool run:",
            "  line two",
            "  line three",
            "",
            "(3 older messages, about 40 tokens, are not in memory yet ...)",
            "  not an item line",
        ]
    )
    assert parse_memory_items(block) == [
        (REF, "Ana has a dog\nand a cat"),
        (OBS_A, "User: I moved to Lisbon."),
        (OBS_B, "Tool run:\nline two\nline three"),
    ]


def test_split_recent() -> None:
    rendered = [("D1:1", "[user] hello"), ("D1:2", "[assistant] a\nb"), ("D1:3", "[user] bye")]
    assert split_recent("[user] hello\n[assistant] a\nb\n[user] bye", rendered) == dict(rendered)
    # A message the block altered keeps what it shows, up to the next message.
    altered = "[user] hello\n[assistant] a\n[redacted]\n[user] bye"
    assert split_recent(altered, rendered)["D1:2"] == "[assistant] a\n[redacted]"
    clipped = "[user] hello\n[assistant] a\nb\n[user] b …[clipped: 2 more characters]"
    assert split_recent(clipped, rendered)["D1:3"] == "[user] b …[clipped: 2 more characters]"


def _context(recent: dict[str, str], *items: MemoryItem) -> ShownContext:
    text = "\n".join([*(i.text for i in items), *recent.values()])
    return ShownContext(recent=recent, memory=items, text=normalize(text))


def _item(ref: str, text: str, *cites: str) -> MemoryItem:
    return MemoryItem(ref, text, frozenset(cites), frozenset(cites))


def test_grounded_needs_the_evidence_turns_own_text() -> None:
    shown = _context(
        {"D2:1": "[user] My sister moved to Lisbon."},
        _item(OBS_A, "User: I visited the capital of Portugal.", "D1:4"),
        _item(OBS_B, "User: Pickle is my beagle.", "D1:1", "D1:2"),
    )
    # In the context, but not in what is shown for D1:4: ungrounded only.
    assert ungrounded_answer("Lisbon", ["D1:4"], shown) is True
    assert grounded_answer("Lisbon", ["D1:4"], shown) is False
    assert grounded_answer("Lisbon", ["D2:1"], shown) is True  # the recent rendering
    assert grounded_answer("Pickle", ["D1:2"], shown) is True  # an observation citing it
    assert grounded_answer("Pickle", ["D1:3"], shown) is False
    assert grounded_answer("Pickle", [], shown) is None  # nothing to ground it in
    assert grounded_answer("Yes", ["D1:1"], shown) is None
    assert ungrounded_answer("Pickle", [], shown) is None


def test_reflections_ground_and_reach_through_their_observations() -> None:
    # What a reflection's recall offers: the sources of its supporting observations.
    shown = shown_context(
        f"## Reflections\n- [{REF}] Ana adopted Pickle.",
        "[user] ok",
        [("D2:3", "[user] ok")],
        {REF: Recalled(frozenset({"D1:1", "D1:2"}), frozenset({"D1:1", "D1:2"}))},
    )
    assert grounded_answer("Pickle", ["D1:2"], shown) is True
    assert reached(["D1:1", "D2:3", "D1:3"], shown) == ("D1:1", "D2:3")


def test_reach_counts_messages_neither_shown_nor_cited() -> None:
    # D1:3 is cited but the recall cannot return it (not on the branch): not reachable.
    shown = _context(
        {"D2:1": "[user] hi"},
        MemoryItem(OBS_A, "User: x", frozenset({"D1:1", "D1:3"}), frozenset({"D1:1"})),
    )
    assert shown.reachable() == {"D1:1", "D2:1"}
    assert out_of_reach(["D1:1", "D1:2", "D1:3", "D2:1"], shown) == ("D1:2", "D1:3")


def test_spread() -> None:
    assert spread([]) is None
    one = spread([0.5])
    assert one is not None and (one.mean, one.sd) == (0.5, 0.0)
    many = spread([0.4, 0.6])
    assert many is not None
    assert many.mean == pytest.approx(0.5) and many.sd == pytest.approx(0.1414, abs=1e-4)
    assert (many.low, many.high) == (0.4, 0.6)
