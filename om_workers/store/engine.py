"""Engines for the store: URL normalisation, SQLite pragmas and write transactions.

SQLite allows one writer at a time. Every write transaction here starts with ``BEGIN
IMMEDIATE``, which takes the write lock up front: two writers queue on the busy timeout instead
of both reading the same leaf and one failing on upgrade (a deferred transaction that later
writes gets ``SQLITE_BUSY`` at once, busy timeout or not). SQLite's busy handler sleeps in
steps of 1 to 100 ms, so writers waiting there left the database idle most of the time:
profiled, two thirds of a busy threads-pool worker's flush time was spent in ``BEGIN``, and an
API process beside a busy worker took 11 ms to record a flush request instead of 1.5. So
writers queue before ``BEGIN``: the threads of one process on a Python lock, which hands over
at once, and the processes on an advisory file lock beside the database (``<file>-writers``,
``flock``), which the kernel hands to a waiting process as soon as it is released. (Polling it
instead starved a single-threaded API process beside a worker whose threads passed the lock
among themselves.) A process that dies releases it with its file; one stopped inside a write
transaction holds every other writer until it resumes, as it would hold SQLite's own lock.
WAL lets readers go on while one writes. PostgreSQL writers serialise per session with
``SELECT ... FOR UPDATE`` instead.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError

from om_workers.errors import ConfigError, WritersBusyError
from om_workers.store.search_terms_sql import register as register_index_terms

SQLITE_BUSY_TIMEOUT_S = 30.0

_BEGIN_MODE = "om_sqlite_begin"


def normalize_database_url(url: str) -> str:
    """The URL with PostgreSQL pinned to psycopg v3 (``postgresql://`` -> ``postgresql+psycopg``).

    Raises :class:`ConfigError` for a URL SQLAlchemy cannot parse or a backend other than
    SQLite and PostgreSQL.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"invalid database URL: {exc}") from None
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        # Spelled out: the default driver of a bare postgresql:// differs between SQLAlchemy
        # releases (psycopg2 in 2.0), and psycopg 3 is the one this package installs.
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif backend != "sqlite":
        raise ConfigError(f"unsupported database backend {backend!r}: use sqlite or postgresql")
    return parsed.render_as_string(hide_password=False)


def create_store_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url`` set up for the store (pragmas and begin mode on SQLite).

    Raises :class:`ConfigError` for an unusable URL. Connecting happens lazily, on first use.
    """
    normalized = normalize_database_url(url)
    if make_url(normalized).get_backend_name() == "sqlite":
        connect_args = dict(kwargs.pop("connect_args", {}))
        connect_args.setdefault("timeout", SQLITE_BUSY_TIMEOUT_S)
        engine = create_engine(normalized, connect_args=connect_args, **kwargs)
        _configure_sqlite(engine)
        return engine
    engine = create_engine(normalized, **kwargs)
    _ping_after_idle(engine)
    return engine


PING_AFTER_IDLE_S = 5.0
"""A pooled PostgreSQL connection idle this long (seconds) is pinged before it is handed out."""


def _ping_after_idle(engine: Engine) -> None:
    """Ping a connection at checkout only when it sat in the pool ``PING_AFTER_IDLE_S`` or
    more; a dead one is replaced (the pool tries a fresh connection) before anyone uses it.

    SQLAlchemy's ``pool_pre_ping`` pings at every checkout: a round trip and a statement on
    the server for every transaction, three times an agent's turn. A connection in steady use
    needs none: should the server restart under it, the statement fails, SQLAlchemy
    invalidates the whole pool, and the caller gets the store's ``StoreUnavailableError``
    (a 503 with ``Retry-After``) while the next checkout connects afresh."""

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info[_CHECKED_IN] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get(_CHECKED_IN)
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise DisconnectionError(f"pooled connection failed its ping: {exc}") from exc


_CHECKED_IN = "om_checked_in"


def in_memory_sqlite(url: str) -> bool:
    """Whether ``url`` names an in-memory SQLite database (served by one shared connection)."""
    parsed = make_url(normalize_database_url(url))
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


class _SqliteWriters:
    """The queue of one SQLite file's writers: a lock for the threads of this process, then
    an advisory lock on ``<file>-writers`` for the processes (none for an in-memory
    database). Re-entrant within a thread, like the lock it extends."""

    def __init__(self, database: str | None) -> None:
        self._threads = threading.RLock()
        self._path = f"{database}-writers" if database not in (None, "", ":memory:") else None
        self._fd: tuple[int, int] | None = None  # (pid, fd): a forked child opens its own
        self._depth = 0

    @contextmanager
    def held(self, *, wait: bool = True) -> Iterator[None]:
        """Hold the head of the queue: block until then, or, without ``wait``, raise
        :class:`~om_workers.errors.WritersBusyError` when another writer holds it."""
        if not self._threads.acquire(blocking=wait):
            raise WritersBusyError("another thread of this process is writing")
        try:
            self._depth += 1
            fd = self._file_lock(wait) if self._depth == 1 else None
            try:
                yield
            finally:
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._depth -= 1
            self._threads.release()

    def _file_lock(self, wait: bool) -> int | None:
        if self._path is None:
            return None
        if self._fd is None or self._fd[0] != os.getpid():
            self._fd = (os.getpid(), os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600))
        try:
            fcntl.flock(self._fd[1], fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WritersBusyError("another process is writing") from None
        return self._fd[1]


_WRITE_LOCKS: weakref.WeakKeyDictionary[Engine, _SqliteWriters] = weakref.WeakKeyDictionary()


def _configure_sqlite(engine: Engine) -> None:
    _WRITE_LOCKS[engine] = _SqliteWriters(engine.url.database)
    in_memory = engine.url.database in (None, "", ":memory:")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Hand transaction control to the "begin" hook below: pysqlite's own implicit BEGIN
        # is deferred and is not emitted before SELECTs.
        dbapi_connection.isolation_level = None
        register_index_terms(dbapi_connection)
        cursor = dbapi_connection.cursor()
        try:
            if not in_memory:
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
            cursor.execute("PRAGMA foreign_keys=ON")
            # Durable at every checkpoint, and much faster than FULL in WAL mode.
            cursor.execute("PRAGMA synchronous=NORMAL")
            # Deleted and overwritten content is zeroed in the file, not left in free pages:
            # erased text must not survive in the database's bytes (erasure.py checkpoints the
            # WAL after each erasure so the old page images leave it too).
            cursor.execute("PRAGMA secure_delete=ON")
        finally:
            cursor.close()

    def _begin(pooled: Any) -> None:
        # Straight to the driver: a BEGIN through SQLAlchemy's execution path (compiled
        # statement, result object) cost as much as a query, on every transaction. Its errors
        # (a lock held past the busy timeout) are wrapped by SQLAlchemy, as any driver error.
        pooled.driver_connection.execute(f"BEGIN {pooled.info.get(_BEGIN_MODE, 'DEFERRED')}")

    # The dialect's own hook rather than a "begin" listener: a connection listener on the
    # engine makes SQLAlchemy join two dispatchers for every connection it opens (4 % of a
    # request's CPU on the serving path).
    engine.dialect.do_begin = _begin  # type: ignore[method-assign,assignment]


_NOT_WAITING: ContextVar[bool] = ContextVar("om_sqlite_writers_not_waited", default=False)


@contextmanager
def writers_not_waited() -> Iterator[None]:
    """Inside the block, a SQLite write transaction that would wait for another writer (a
    thread of this process, or another process, at the head of the file's queue) raises
    :class:`~om_workers.errors.WritersBusyError` at once instead, before anything is read or
    written. For a caller on an event loop, which must not block there but can hand the work
    to a thread that may wait. No effect on PostgreSQL."""
    token = _NOT_WAITING.set(True)
    try:
        yield
    finally:
        _NOT_WAITING.reset(token)


@contextmanager
def writer_connection(engine: Engine) -> Iterator[Connection]:
    """A connection whose transactions may write, for as long as the block lasts.

    On SQLite it waits for the head of the file's queue of writers (threads, then processes)
    and holds it until the block ends (inside :func:`writers_not_waited`, it raises
    :class:`~om_workers.errors.WritersBusyError` rather than wait); its transactions begin
    IMMEDIATE (take the write lock first). The connection is taken from the pool before the
    wait and given back after the head is passed on: the queue is the one writer's, and every
    step inside it lengthens every other writer's wait. On PostgreSQL it is a plain
    connection: writers serialise per row, not per database.
    """
    writers = _WRITE_LOCKS.get(engine)
    with engine.connect() as connection:
        if writers is None:
            yield connection
            return
        # Read by the BEGIN hook: this pooled connection's transactions take the write lock.
        info = connection.connection.info
        info[_BEGIN_MODE] = "IMMEDIATE"
        try:
            with writers.held(wait=not _NOT_WAITING.get()):
                yield connection
        finally:
            info.pop(_BEGIN_MODE, None)


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that may write (see :func:`writer_connection`); committed
    on success, rolled back on error."""
    with writer_connection(engine) as connection, connection.begin():
        yield connection


@contextmanager
def read_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in a read transaction: one consistent view for several queries. It never
    waits for the writers' queue (WAL readers go on while one writes)."""
    with engine.connect() as connection, connection.begin():
        yield connection


CHECKPOINT_ATTEMPTS = 20
CHECKPOINT_PAUSE_S = 0.05


def checkpoint_wal(engine: Engine) -> bool:
    """On SQLite, copy the write-ahead log into the database and truncate it to zero bytes
    (``PRAGMA wal_checkpoint(TRUNCATE)``), so page images it held (erased text among them) are
    in no file any more. A reader in the middle of a transaction blocks it: tried up to
    ``CHECKPOINT_ATTEMPTS`` times, ``CHECKPOINT_PAUSE_S`` apart. True when it completed; on
    PostgreSQL (nothing to do) always True. Raises SQLAlchemy's errors (callers translate).
    """
    writers = _WRITE_LOCKS.get(engine)
    if writers is None:
        return True
    for attempt in range(CHECKPOINT_ATTEMPTS):
        # Outside any transaction (a checkpoint cannot run inside one), at the head of the
        # writers' queue so this process's own writers do not race it.
        with writers.held():
            raw = engine.raw_connection()
            try:
                cursor = raw.cursor()
                busy = cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                cursor.close()
            finally:
                raw.close()
        if busy is not None and int(busy[0]) == 0:
            return True
        if attempt + 1 < CHECKPOINT_ATTEMPTS:
            time.sleep(CHECKPOINT_PAUSE_S)
    return False
