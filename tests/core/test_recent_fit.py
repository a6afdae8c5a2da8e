"""The recent block keeps the newest units that fit its room: sized newest first, the answer
must be the one of dropping the oldest units while the rest is too large."""

from __future__ import annotations

import random

from om_core.ledger.models import SessionEntry
from om_core.read.context import _newest_fitting, _rendered_size
from om_core.read.window import render_message, tool_units
from tests.core.builders import Branch


def _dropping_oldest(units: list[list[SessionEntry]], room: int) -> int:
    sizes = [sum(len(render_message(e.message)) + 1 for e in u if e.message) for u in units]
    start = 0
    while len(units) - start > 1 and sum(sizes[start:]) - 1 > room:
        start += 1
    return start


def test_newest_fitting_units_as_dropping_the_oldest() -> None:
    rng = random.Random(5)
    kept = {True: 0, False: 0}
    for _ in range(2_000):
        branch = Branch()
        for n in range(rng.randint(0, 12)):
            if rng.random() < 0.3:
                branch.call(f"c{n}")
                branch.result(f"c{n}", "r" * rng.randint(0, 300))
            else:
                branch.user("u" * rng.randint(0, 300))
        units = tool_units(branch.entries)
        room = rng.randint(0, 3_000)
        assert _newest_fitting(units, room) == _dropping_oldest(units, room), room
        # The recent block skips the sizing when the whole window fits, which must be
        # exactly when nothing is dropped (at the boundary too).
        size = _rendered_size(branch.entries)
        for at in (room, size, size - 1):
            fits = size <= at
            kept[fits] += 1
            if fits or len(units) > 1:
                assert (_dropping_oldest(units, at) == 0) == fits, (at, size)
    assert min(kept.values()) > 1_000  # both sides of the shortcut, many times
