"""Whether a branch tail is long enough for a context read (``TailWalk``), checked against
the rule stated plainly: every message's facts gathered first, then each condition on its own."""

from __future__ import annotations

import random
from typing import Any

import pytest

from om_core.ledger.fold import is_eligible_observation_source
from om_core.ledger.models import SessionEntry
from om_core.ledger.tokens import estimate_entry_tokens
from om_workers.store.tail_cache import holds_entry
from om_workers.tails import TailReach, TailWalk
from tests.core.builders import Branch


def _holds(tail: list[SessionEntry], keep: int, reach: TailReach | None) -> bool:
    """One question of a fresh walk: what a read asks of its first tail."""
    return TailWalk(keep, reach).holds(tail)


def _stated(tail: list[SessionEntry], keep: int, reach: TailReach | None) -> bool:
    messages = [e for e in tail if is_eligible_observation_source(e)]
    if len(messages) <= keep:
        return False
    calls = {c.id for e in messages if e.message for c in e.message.tool_calls}
    window = messages[-keep:] if keep else []
    answered = all(
        e.message is None or e.message.role != "tool" or e.message.tool_call_id in calls
        for e in window
    )
    if not answered or reach is None:
        return answered
    if reach.cursor is not None and any(e.id == reach.cursor for e in tail):
        return True
    if reach.max_tokens is None:
        return False
    return sum(estimate_entry_tokens(e) for e in messages) > reach.max_tokens


def _random_branch(rng: random.Random) -> list[SessionEntry]:
    branch, open_calls = Branch(), list[str]()
    for n in range(rng.randint(0, 30)):
        pick = rng.random()
        if pick < 0.2:
            call_id = f"c{n}"
            branch.call(call_id)
            open_calls.append(call_id)
        elif pick < 0.45:
            # A result of an open call, or of a call this tail may never hold.
            answered = open_calls.pop(rng.randrange(len(open_calls))) if open_calls else None
            branch.result(answered or f"elsewhere{n}", "x" * rng.randint(0, 400))
        elif pick < 0.55:
            branch.custom({"type": "note", "n": n})
        else:
            branch.message(rng.choice(("user", "assistant")), "y" * rng.randint(0, 400))
    return branch.entries


def _random_question(rng: random.Random) -> tuple[list[SessionEntry], int, TailReach | None]:
    """A random tail, how many messages to keep, and how far back to reach (or not)."""
    tail = _random_branch(rng)
    ids = [e.id for e in tail]
    cursor = rng.choice([None, "gone", *ids]) if ids else None
    reach = rng.choice([None, TailReach(cursor, rng.choice([None, 0, 50, 300, 2_000]))])
    return tail, rng.randint(0, 6), reach


def test_tail_holds_as_stated_for_random_tails() -> None:
    rng = random.Random(3)
    checked = {True: 0, False: 0}
    for _ in range(3_000):
        tail, keep, reach = _random_question(rng)
        expected = _stated(tail, keep, reach)
        assert _holds(tail, keep, reach) is expected, (keep, reach, [e.id for e in tail])
        checked[expected] += 1
    assert min(checked.values()) > 300  # both answers were exercised, many times


@pytest.mark.parametrize(
    ("keep", "holds"),
    [(1, True), (2, False), (3, False)],  # the result's call is not in the tail
)
def test_a_window_result_needs_its_call_in_the_tail(keep: int, holds: bool) -> None:
    branch = Branch()
    branch.user("before")
    branch.result("called-earlier", "output")
    branch.user("after")
    assert _holds(branch.entries, keep, None) is holds


def test_the_cursor_or_the_budget_ends_the_reach() -> None:
    branch = Branch()
    for _ in range(6):
        branch.user("z" * 400)  # about 100 tokens each
    ids = [e.id for e in branch.entries]
    assert _holds(branch.entries, 2, TailReach(ids[0], None))
    assert not _holds(branch.entries, 2, TailReach("older", None))
    assert _holds(branch.entries, 2, TailReach("older", 300))
    assert not _holds(branch.entries, 2, TailReach("older", 10_000))


def test_a_walk_over_a_doubling_tail_answers_as_a_walk_over_each_tail() -> None:
    # A context read asks one walk of its tail as it doubles it (64, 128, ... entries).
    rng = random.Random(11)
    checked = {True: 0, False: 0}
    for _ in range(2_000):
        branch, keep, reach = _random_question(rng)
        walk, size = TailWalk(keep, reach), 1
        while True:
            tail = branch[-size:]
            expected = _holds(tail, keep, reach)
            assert walk.holds(tail) is expected, (keep, reach, [e.id for e in branch], size)
            checked[expected] += 1
            if expected or size >= len(branch):
                break
            size *= 2
    assert min(checked.values()) > 300


def test_a_cursor_found_by_the_caller_spares_the_walk_and_answers_the_same() -> None:
    # A context read finds the observation cursor by its seq and tells the walk so.
    rng = random.Random(17)
    checked = {True: 0, False: 0}
    for _ in range(2_000):
        tail, keep, _ = _random_question(rng)
        if not tail:
            continue
        cursor = rng.choice(tail).id
        reach = TailReach(cursor, rng.choice([None, 0, 300]))
        expected = _stated(tail, keep, reach)
        assert TailWalk(keep, reach).holds(tail, reached=True) is expected
        checked[expected] += 1
    assert min(checked.values()) > 300


def test_a_told_walk_stops_at_the_recent_window() -> None:
    branch = Branch()
    for n in range(40):
        branch.user(f"message {n}")

    class Counted(list[SessionEntry]):
        read = 0

        def __getitem__(self, index: Any) -> Any:
            Counted.read += 1
            return super().__getitem__(index)

    tail = Counted(branch.entries)
    assert TailWalk(2, TailReach(branch.entries[0].id, None)).holds(tail, reached=True)
    assert Counted.read == 3  # the last three messages, not the forty back to the cursor


@pytest.mark.parametrize(
    ("entry", "seq", "holds"),
    [
        ("e2", 12, True),  # its seq, its id
        ("e0", 10, True),  # the tail's first entry
        ("e3", 13, True),  # its last
        ("other", 12, False),  # the seq names another entry
        ("e2", 11, False),  # a wrong seq: the id does not match
        ("e2", 0, False),  # unknown seq: the caller looks by id
        ("e9", 9, False),  # older than the tail
        ("e9", 14, False),  # newer than the tail
        (None, 12, False),  # no entry to look for
    ],
)
def test_holds_entry_finds_an_entry_by_seq_and_checks_its_id(
    entry: str | None, seq: int, holds: bool
) -> None:
    branch = Branch()
    for n in range(4):
        branch.user(f"message {n}")
    tail = [e.model_copy(update={"id": f"e{n}"}) for n, e in enumerate(branch.entries)]
    assert holds_entry(tail, (10, 11, 12, 13), entry, seq) is holds
