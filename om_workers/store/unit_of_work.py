"""The unit of work: one transaction on the store's engine, and the repositories bound to it.

``with uow:`` opens the transaction; inside it ``uow.sessions``, ``uow.entries``,
``uow.memory`` (snapshot, items, the flush's view, the context state), ``uow.jobs``,
``uow.tombstones``, ``uow.links`` (the funnel), ``uow.erasure`` and ``uow.erased_rows``
(erasure), ``uow.webhooks`` run their statements on its connection;
``uow.commit()`` ends it. Leaving the block without a commit rolls the transaction back, so an
operation that raises part-way writes nothing. :class:`SqlReadUnitOfWork` is the form for
reads: it cannot commit, and on SQLite it never waits for the writers' queue (WAL readers go on
while one writes). Each ``with`` opens a new transaction on a pooled connection.

This is also the one seam where SQLAlchemy's errors become the store's
(:func:`translate_errors`): a lost unique-constraint race is a :class:`WriteRace` (the service
layer runs the operation once more), an unreachable or locked database a
:class:`~om_workers.errors.StoreUnavailableError`, anything else a
:class:`~om_workers.errors.StoreError`. Nothing from SQLAlchemy or a driver leaves it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import Self

from sqlalchemy import Connection, Engine, RootTransaction
from sqlalchemy.exc import (
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from om_workers.errors import StoreError, StoreUnavailableError
from om_workers.store.engine import writer_connection
from om_workers.store.repositories import (
    EntryRepository,
    ErasedRowsRepository,
    ErasureRepository,
    JobRepository,
    LinkRepository,
    MemoryRepository,
    SearchRepository,
    SessionRepository,
    TombstoneRepository,
    UsageRepository,
    VectorRepository,
    WebhookRepository,
)
from om_workers.store.search_settings import tune_for_search
from om_workers.store.snapshot import SnapshotCache
from om_workers.store.tail_cache import TailCache
from om_workers.telemetry import tracing


def utc_now() -> datetime:
    """The store's default clock."""
    return datetime.now(UTC)


class WriteRace(StoreError):
    """A unique constraint hit by a concurrent writer; the service layer runs the operation
    once more (:func:`~om_workers.store.service.retry_once_after_race`)."""


def _describe(exc: SQLAlchemyError) -> str:
    # The driver's own first line says what failed without echoing SQL parameters, which may
    # hold entry content.
    original = getattr(exc, "orig", None)
    text = str(original if original is not None else exc).strip().splitlines()
    return f"{type(original or exc).__name__}: {text[0] if text else ''}"


def translated(exc: SQLAlchemyError) -> StoreError:
    """The store error that stands for a SQLAlchemy error (see the module docstring)."""
    if isinstance(exc, IntegrityError):
        return WriteRace(_describe(exc))
    if isinstance(exc, OperationalError | InterfaceError | DisconnectionError | PoolTimeoutError):
        return StoreUnavailableError(_describe(exc))
    return StoreError(_describe(exc))


@contextmanager
def translate_errors() -> Iterator[None]:
    """Raise the :func:`translated` store error for any SQLAlchemy error inside the block."""
    try:
        yield
    except SQLAlchemyError as exc:
        raise translated(exc) from exc


class SqlReadUnitOfWork:
    """One read transaction and the repositories on it; ``with`` it, then read.

    The repositories exist inside the ``with`` block only. Leaving the block ends the
    transaction (rolled back: it wrote nothing). Raises
    :class:`~om_workers.errors.StoreUnavailableError` or
    :class:`~om_workers.errors.StoreError` for a database failure, on entering, inside the
    block or on leaving it; every other error of the block passes through unchanged.
    """

    sessions: SessionRepository
    entries: EntryRepository
    memory: MemoryRepository
    jobs: JobRepository
    tombstones: TombstoneRepository
    links: LinkRepository
    erasure: ErasureRepository
    erased_rows: ErasedRowsRepository
    search: SearchRepository
    usage: UsageRepository
    webhooks: WebhookRepository
    vectors: VectorRepository

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], datetime] = utc_now,
        snapshots: SnapshotCache | None = None,
        tails: TailCache | None = None,
        one_statement: bool = False,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._snapshots = snapshots if snapshots is not None else SnapshotCache()
        self._tails = tails if tails is not None else TailCache()
        self._one_statement = one_statement
        self._stack: ExitStack | None = None
        self._transaction: RootTransaction | None = None

    _SPAN = "db transaction read"

    def _connect(self, stack: ExitStack) -> Connection:
        connection = stack.enter_context(self._engine.connect())
        if connection.dialect.name != "postgresql":
            return connection
        if self._one_statement:
            # A single statement is its own snapshot: no BEGIN and ROLLBACK around it, two
            # round trips of three.
            connection.execution_options(isolation_level="AUTOCOMMIT")
        else:
            # PostgreSQL's default (READ COMMITTED) takes a snapshot per statement: a read of
            # several statements could straddle a worker's commit (a session's head read
            # before it, its memory after). One snapshot for the block, as SQLite's WAL read
            # transaction has; psycopg says so in its BEGIN, no round trip more.
            connection.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )
        return connection

    def _span_attributes(self) -> dict[str, str]:
        return {"db.system.name": self._engine.dialect.name}

    def __enter__(self) -> Self:
        if self._stack is not None:
            raise RuntimeError("this unit of work is already open")
        stack = ExitStack()
        try:
            # The span covers the whole transaction, the wait for SQLite's writers included.
            stack.enter_context(tracing.span(self._SPAN, attributes=self._span_attributes()))
            with translate_errors():
                connection = self._connect(stack)
                self._transaction = connection.begin()
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        self.sessions = SessionRepository(connection)
        self.entries = EntryRepository(connection, self._tails)
        self.memory = MemoryRepository(connection, self._snapshots)
        self.jobs = JobRepository(connection)
        self.tombstones = TombstoneRepository(connection)
        self.links = LinkRepository(connection)
        self.erasure = ErasureRepository(connection)
        self.erased_rows = ErasedRowsRepository(connection)
        self.search = SearchRepository(connection)
        self.usage = UsageRepository(connection)
        self.webhooks = WebhookRepository(connection)
        self.vectors = VectorRepository(connection)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, transaction = self._stack, self._transaction
        self._stack = self._transaction = None
        if stack is None or transaction is None:
            return
        with translate_errors():
            try:
                if transaction.is_active:
                    self._end(transaction, failed=exc is not None)
            finally:
                stack.close()
        if isinstance(exc, SQLAlchemyError):
            raise translated(exc) from exc

    def _end(self, transaction: RootTransaction, *, failed: bool) -> None:
        """End the block's transaction, which is still open. A read on PostgreSQL is READ
        ONLY, so COMMIT ends it as ROLLBACK would; but psycopg forgets every statement it
        prepared on the connection at a ROLLBACK, and reads ending in one had every hot
        statement parsed and planned anew at each use (half of the server's CPU under the
        agent-turns load)."""
        if not failed and transaction.connection.dialect.name == "postgresql":
            transaction.commit()
        else:
            transaction.rollback()

    def plan_for_search(self) -> None:
        """Ready this transaction for a search: PostgreSQL plans its statements for their own
        values and reads ahead of its scattered row reads (:mod:`~om_workers.store.
        search_settings`; a no-op on SQLite)."""
        if self._transaction is None:
            raise RuntimeError("plan_for_search() outside the unit of work's block")
        with translate_errors():
            tune_for_search(self._transaction.connection)

    def now(self) -> datetime:
        """The store's clock (aware UTC by default)."""
        return self._clock()

    @property
    def backend(self) -> str:
        """The database's dialect name: ``sqlite`` or ``postgresql``."""
        return self._engine.dialect.name


class SqlUnitOfWork(SqlReadUnitOfWork):
    """One transaction that may write, and the repositories on it; ``with`` it, then commit.

    On SQLite the transaction waits for the head of the writers' queue and begins IMMEDIATE
    (holds the database's write lock up front); PostgreSQL writers lock the rows they change
    (``FOR UPDATE`` on a session row serialises its appends). Everything written inside the
    block is rolled back unless :meth:`commit` ran. Raises what :class:`SqlReadUnitOfWork`
    raises; a lost unique-constraint race is a :class:`WriteRace`.
    """

    _SPAN = "db transaction write"

    _committed: list[Callable[[], None]]

    def __enter__(self) -> Self:
        self._committed = []
        return super().__enter__()

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run ``action`` once :meth:`commit` has committed, never if the block rolls back:
        for what this process may only believe of committed rows (its caches). ``action``
        must not raise."""
        self._committed.append(action)

    def _connect(self, stack: ExitStack) -> Connection:
        return stack.enter_context(writer_connection(self._engine))

    def _end(self, transaction: RootTransaction, *, failed: bool) -> None:
        # What the block wrote without committing is discarded.
        transaction.rollback()

    def commit(self) -> None:
        """Commit what the block wrote; the transaction is over (leaving the block then
        releases the connection). Raises :class:`~om_workers.errors.StoreUnavailableError` or
        :class:`~om_workers.errors.StoreError` (nothing was committed)."""
        if self._transaction is None:
            raise RuntimeError("commit() outside the unit of work's block")
        with translate_errors():
            self._transaction.commit()
        actions, self._committed = self._committed, []
        for action in actions:
            action()

    def rollback(self) -> None:
        """Roll back what the block wrote so far (leaving the block does it anyway)."""
        if self._transaction is not None:
            with translate_errors():
                self._transaction.rollback()
