"""What every part of the store shares: the engine, the clock, transactions, error translation."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import (
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from om_workers.errors import OMWorkersError, StoreError, StoreUnavailableError
from om_workers.store.engine import read_transaction, write_transaction

_T = TypeVar("_T")


def utc_now() -> datetime:
    """The store's default clock."""
    return datetime.now(UTC)


class WriteRace(StoreError):
    """A unique constraint hit by a concurrent writer; the operation is retried once."""


def _describe(exc: SQLAlchemyError) -> str:
    # The driver's own first line says what failed without echoing SQL parameters, which may
    # hold entry content.
    original = getattr(exc, "orig", None)
    text = str(original if original is not None else exc).strip().splitlines()
    return f"{type(original or exc).__name__}: {text[0] if text else ''}"


class StoreBase:
    """Engine, clock and the transaction helpers the store's parts build on."""

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._engine = engine
        self._clock = clock

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for migrations and tooling)."""
        return self._engine

    def close(self) -> None:
        """Close pooled connections; the store can still be used afterwards (it reconnects)."""
        self._engine.dispose()

    def _now(self) -> datetime:
        return self._clock()

    @contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except OMWorkersError:
            raise
        except IntegrityError as exc:
            raise WriteRace(_describe(exc)) from exc
        except (OperationalError, InterfaceError, DisconnectionError, PoolTimeoutError) as exc:
            raise StoreUnavailableError(_describe(exc)) from exc
        except SQLAlchemyError as exc:
            raise StoreError(_describe(exc)) from exc

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self._translate(), write_transaction(self._engine) as connection:
            yield connection

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._translate(), read_transaction(self._engine) as connection:
            yield connection

    def _retrying(self, operation: Callable[[], _T]) -> _T:
        """Run a write; after a lost unique-constraint race run it once more.

        The second run sees the row the other writer committed and answers as for any
        existing row (duplicate, conflict, already exists). A second race is a
        :class:`StoreError`.
        """
        with contextlib.suppress(WriteRace):
            return operation()
        try:
            return operation()
        except WriteRace as exc:
            raise StoreError(str(exc)) from exc
