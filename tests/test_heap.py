"""A server process's heap settles once it is built: what it holds then is frozen out of the
garbage collector's sight and young collections are rarer (``om_workers.heap``). In a child
interpreter, so this process's collector is left as it is."""

from __future__ import annotations

import subprocess
import sys

from om_workers.heap import YOUNG_THRESHOLD

CHECK = """
import gc
from om_workers import heap
assert gc.get_freeze_count() == 0
built = [object() for _ in range(1000)]
heap.settle()
assert gc.get_freeze_count() >= len(built), gc.get_freeze_count()
assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD, gc.get_threshold()
heap.settle()  # idempotent
assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
print("settled")
"""


def test_settle_freezes_what_was_built_and_collects_the_young_less_often() -> None:
    assert YOUNG_THRESHOLD > 700  # CPython's default, which the API outgrew
    done = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "settled"


BUILDING = """
import gc
from om_workers import heap
try:
    with heap.building():
        assert not gc.isenabled()
        raise KeyError("a start that fails")
except KeyError:
    pass
assert gc.isenabled() and gc.get_freeze_count() == 0
with heap.building():
    assert not gc.isenabled()
    built = [object() for _ in range(1000)]
assert gc.isenabled()
assert gc.get_freeze_count() >= len(built), gc.get_freeze_count()
assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD, gc.get_threshold()
print("built")
"""


def test_building_pauses_the_collector_then_settles_and_a_failed_start_only_resumes_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BUILDING], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "built"
