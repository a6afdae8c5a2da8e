"""The garbage collector of a long-lived server process (``om api``, ``om worker``).

An API process under load holds a few hundred thousand objects that live as long as it does
(modules, the app and its schemas, the store's caches) and makes and drops thousands more per
request. CPython's collector went over all of them: a full collection took 100 to 230 ms on a
two-core machine, every few seconds, with every request stalled behind it (the slowest
context reads were the ones a collection fell on), and young collections, several a second,
cost about a millisecond an agent turn. :func:`settle` moves what the process built at start
out of the collector's sight (:func:`gc.freeze`) and collects the young generation after
:data:`YOUNG_THRESHOLD` allocations instead of 700, so that fewer short-lived objects reach
the old generations and full collections become rarer and shorter. Reference counting still
frees nearly everything at once; the collector is only for cycles.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

YOUNG_THRESHOLD: Final = 20_000
"""Allocations (net of frees) between two collections of the youngest generation."""


def settle() -> None:
    """Freeze the objects built so far out of the collector's sight and set the young
    threshold; call once the process has built what it serves with (idempotent)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


@contextmanager
def building() -> Iterator[None]:
    """Run the block (the process's imports and the app it serves) with the collector off,
    then :func:`settle`. What a start builds lives as long as the process, so collections
    among it while it is built free nearly nothing, and they were about 0.25 s of an API
    process's 1.7 s of imports. When the block raises, the collector is back on and nothing
    is frozen."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
    settle()
