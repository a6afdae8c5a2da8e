"""What the store's service layer shares: opening units of work, and the retry after a lost race.

Each public operation of :class:`~om_workers.store.SqlStore` is a short function over one unit
of work (:mod:`~om_workers.store.unit_of_work`): open it, ask its repositories, commit. The
services are grouped by concern: session operations (:mod:`.sessions`), reads
(:mod:`.session_reads`) and flush jobs (:mod:`.jobs`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from sqlalchemy import Engine

from om_workers.errors import StoreError
from om_workers.store.snapshot import SnapshotCache
from om_workers.store.tail_cache import TailCache
from om_workers.store.unit_of_work import SqlReadUnitOfWork, SqlUnitOfWork, WriteRace, utc_now

_T = TypeVar("_T")


@dataclass(frozen=True)
class UnitsOfWork:
    """Makes the units of work of one store: its engine, its clock, and its caches of parsed
    snapshot ledgers and branch tails (shared by every read, so what was parsed outlives one
    transaction)."""

    engine: Engine
    clock: Callable[[], datetime] = utc_now
    snapshots: SnapshotCache = field(default_factory=SnapshotCache)
    tails: TailCache = field(default_factory=TailCache)

    def write(self) -> SqlUnitOfWork:
        """A unit of work that may write (see :class:`SqlUnitOfWork`)."""
        return SqlUnitOfWork(
            self.engine, clock=self.clock, snapshots=self.snapshots, tails=self.tails
        )

    def read(self, *, one_statement: bool = False) -> SqlReadUnitOfWork:
        """A unit of work for reads (see :class:`SqlReadUnitOfWork`); ``one_statement``: the
        block sends a single statement, which is its own snapshot."""
        return SqlReadUnitOfWork(
            self.engine,
            clock=self.clock,
            snapshots=self.snapshots,
            tails=self.tails,
            one_statement=one_statement,
        )


class Service:
    """A group of the service layer's operations, each over units of work from ``units``."""

    def __init__(self, units: UnitsOfWork) -> None:
        self._units = units


def retry_once_after_race(operation: Callable[[], _T]) -> _T:
    """Run a write; after a lost unique-constraint race (:class:`WriteRace`) run it once more.

    The second run sees the row the other writer committed and answers as for any existing
    row (duplicate, conflict, already exists). A second race is a :class:`StoreError`.
    """
    with contextlib.suppress(WriteRace):
        return operation()
    try:
        return operation()
    except WriteRace as exc:
        raise StoreError(str(exc)) from exc
