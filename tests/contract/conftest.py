"""One harness per implementation of the memory unit of work: in memory, SQLite, PostgreSQL.

Every contract test takes ``harness`` and runs once per implementation, so the in-memory unit
of work the fast tests use can never drift from the SQL one the workers use.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from om_core.flush.unit_of_work import InMemoryUnitOfWork, MemoryUnitOfWork
from om_core.ledger.models import SessionEntry
from om_workers.store import AccountStore, SqlMemoryUnitOfWork, SqlStore, tombstone_scope, upgrade
from tests.conftest import BACKENDS, fresh_database

SESSION = "s1"


class FencedOut(Exception):
    """The in-memory harness's fencing error (the SQL store raises its own)."""


class Harness(Protocol):
    def add(self, *entries: SessionEntry) -> None:
        """Append entries as a host does (at the leaf, or under an explicit parent)."""

    def unit_of_work(self) -> MemoryUnitOfWork:
        """A new flush's unit of work; every earlier one is fenced out from now on."""

    def supersede(self) -> None:
        """Start a newer flush without a unit of work: earlier ones are fenced out."""

    def revoke(self, *entry_ids: str) -> None:
        """Tombstone entries of the session."""

    def branch(self) -> list[SessionEntry]:
        """The whole current branch, root to leaf."""


class _Source:
    def __init__(self, entries: list[SessionEntry]) -> None:
        self.entries = entries

    @property
    def id(self) -> str:
        return SESSION

    def get_entries(self) -> list[SessionEntry]:
        return list(self.entries)


class InMemoryHarness:
    def __init__(self) -> None:
        self.entries: list[SessionEntry] = []
        self.epoch = 0
        self.revoked: set[str] = set()

    def _append(self, entry: SessionEntry) -> None:
        parent = entry.parent_id or (self.entries[-1].id if self.entries else None)
        self.entries.append(entry.model_copy(update={"parent_id": parent}))

    def add(self, *entries: SessionEntry) -> None:
        for entry in entries:
            self._append(entry)

    def unit_of_work(self) -> MemoryUnitOfWork:
        self.epoch += 1
        mine = self.epoch

        def fence() -> None:
            if self.epoch != mine:
                raise FencedOut(f"epoch {mine} superseded by {self.epoch}")

        return InMemoryUnitOfWork(
            _Source(self.entries),
            self._append,
            lambda: frozenset(self.revoked),
            before_write=fence,
        )

    def supersede(self) -> None:
        self.epoch += 1

    def revoke(self, *entry_ids: str) -> None:
        self.revoked.update(entry_ids)

    def branch(self) -> list[SessionEntry]:
        return list(self.entries)


class SqlHarness:
    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.tenant = AccountStore(store.engine).create_tenant("acme").id
        store.create_session(self.tenant, SESSION)

    def add(self, *entries: SessionEntry) -> None:
        self.store.append_entries(self.tenant, SESSION, list(entries))

    def unit_of_work(self) -> MemoryUnitOfWork:
        epoch = self.store.raise_epoch(self.tenant, SESSION)
        return SqlMemoryUnitOfWork(self.store, self.tenant, SESSION, epoch=epoch)

    def supersede(self) -> None:
        self.store.raise_epoch(self.tenant, SESSION)

    def revoke(self, *entry_ids: str) -> None:
        self.store.add_tombstones(self.tenant, tombstone_scope(SESSION), list(entry_ids))

    def branch(self) -> list[SessionEntry]:
        return list(self.store.read_branch(self.tenant, SESSION))


@pytest.fixture(params=["memory", *BACKENDS])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    if request.param == "memory":
        yield InMemoryHarness()
        return
    with fresh_database(request.param, tmp_path) as url:
        upgrade(url)
        store = SqlStore.from_url(url)
        try:
            yield SqlHarness(store)
        finally:
            store.close()
