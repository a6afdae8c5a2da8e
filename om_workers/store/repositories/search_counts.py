"""What SQLite's full-text index knows of a query's stems: how many rows hold each at each
level (``*_vocab``, FTS5's own counts), and how many rows the index holds.

Counting a stem's rows is a pass over them (26 ns a row here: 23 ms for a stem in 870,000 of
a million messages), so a stem in :data:`KEPT_ROWS` rows or more keeps its counts for
:data:`STATS_TTL_S` in this process. Its IDF moves slowly; a level it reached meanwhile is
not missed, because a kept stem is searched at every level.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, text

from om_core.read.search_terms import term_range

KEPT_ROWS = 5_000
"""A stem in at least this many rows keeps its counts for :data:`STATS_TTL_S`."""
STATS_TTL_S = 60.0
"""How long a common stem's counts are kept, in seconds."""


@dataclass(frozen=True)
class Counted:
    """A stem's rows per level in one index, and whether they were kept from an earlier
    search (then every level is searched)."""

    levels: dict[int, int]
    kept: bool

    @property
    def documents(self) -> int:
        """The rows holding the stem at any level."""
        return sum(self.levels.values())


class KeptCounts:
    """Common stems' counts per store engine and index, each kept :data:`STATS_TTL_S`."""

    MAX_STEMS = 4_096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_engine: weakref.WeakKeyDictionary[Engine, dict[tuple[str, str], Any]] = (
            weakref.WeakKeyDictionary()
        )

    def get(self, engine: Engine, table: str, stem: str) -> Counted | None:
        """The kept counts of ``stem`` in ``table``, unless none are or they expired."""
        with self._lock:
            found = self._by_engine.get(engine, {}).get((table, stem))
        if found is None or found[0] < time.monotonic():
            return None
        return Counted(found[1], kept=True)

    def put(self, engine: Engine, table: str, stem: str, levels: dict[int, int]) -> None:
        """Keep ``stem``'s counts (at most :attr:`MAX_STEMS` per engine: all go when full)."""
        with self._lock:
            kept = self._by_engine.setdefault(engine, {})
            if len(kept) >= self.MAX_STEMS:
                kept.clear()
            kept[(table, stem)] = (time.monotonic() + STATS_TTL_S, dict(levels))

    def clear(self) -> None:
        """Forget every kept count (the next search of each stem counts it again)."""
        with self._lock:
            self._by_engine.clear()


KEPT_COUNTS = KeptCounts()


def _varint(block: bytes) -> int:
    """SQLite's varint at the start of ``block`` (big-endian 7-bit groups; a 9th byte is whole)."""
    value = 0
    for byte in block[:8]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value
    return (value << 8) | block[8]


def index_rows(connection: Connection, table: str) -> int:
    """The rows an FTS5 table indexes (the first number of its averages record)."""
    block = connection.execute(text(f"SELECT block FROM {table}_data WHERE id = 1")).scalar()
    return _varint(bytes(block)) if block else 0


def count_levels(connection: Connection, table: str, stems: Sequence[str]) -> dict[str, Counted]:
    """Each of ``stems``' rows per level in ``table`` (kept ones from memory, the rest in one
    statement)."""
    engine = connection.engine
    counted: dict[str, Counted] = {}
    for stem in stems:
        kept = KEPT_COUNTS.get(engine, table, stem)
        if kept is not None:
            counted[stem] = kept
    fresh = [stem for stem in stems if stem not in counted]
    if not fresh:
        return counted
    selects = " UNION ALL ".join(
        f"SELECT {n} AS n, term, doc FROM {table}_vocab WHERE term >= :lo{n} AND term < :hi{n}"
        for n in range(len(fresh))
    )
    params: dict[str, Any] = {}
    for n, stem in enumerate(fresh):
        params[f"lo{n}"], params[f"hi{n}"] = term_range(stem)
    levels: dict[str, dict[int, int]] = {stem: {} for stem in fresh}
    for row in connection.execute(text(selects), params):
        levels[fresh[row.n]][int(str(row.term).rpartition("_")[2])] = int(row.doc)
    for stem in fresh:
        counted[stem] = Counted(levels[stem], kept=False)
        if counted[stem].documents >= KEPT_ROWS:
            KEPT_COUNTS.put(engine, table, stem, levels[stem])
    return counted
