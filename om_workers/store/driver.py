"""The hottest statements of a turn and of a flush, run on the driver's own cursor (SQLite's
``sqlite3``, PostgreSQL's psycopg).

Through SQLAlchemy a statement costs about 20 microseconds of Python around SQLite's own
work (cache key, execution context, result object): 21-26 us against 2-4 us for a one-row
read of the ``sessions`` table, and a job start's UPDATE 45 against 19 us; a turn sends about
a dozen such statements, a flush about fifteen, most of a flush's inside SQLite's writers'
queue, where every other writer waits for them. On PostgreSQL the same Python was about 45 of
a one-row read's 126 us of client CPU (psycopg's own send and wait are the rest). A statement
run here is compiled once per dialect by SQLAlchemy itself (the same SQL, the same bind and
result processing of datetimes and JSON; psycopg's named placeholders rewritten as
positional ones) and then runs on the connection's DBAPI connection, inside the transaction
the connection already holds.

SQLAlchemy runs it instead outside a transaction (SQLAlchemy would begin one first), and for
a statement whose SQL depends on its values (expanding ``IN`` lists, Python-side defaults:
lists go to SQLite as one JSON array, ``json_each``, where a statement is hot). Every
listener of the engine's ``before_cursor_execute`` still sees each statement (the
statement-count tests and benchmarks rely on it), and a driver error is wrapped as
SQLAlchemy wraps it, so the store's error translation is unchanged; a lost server is handed
to SQLAlchemy, which invalidates the pool as it does for its own statements.
"""

from __future__ import annotations

import re
import weakref
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, MultipleResultsFound, NoResultFound
from sqlalchemy.sql import ClauseElement, Executable
from sqlalchemy.sql.compiler import SQLCompiler

Processor = Callable[[Any], Any]

MAX_VALUES = 32_000
"""Values one statement binds at most (SQLite's limit is 32,766)."""
INSERT_CHUNK_ROWS = 1000
"""Rows a multi-row INSERT holds at most, as SQLAlchemy's own batches: SQLite's FTS5 writes
a segment per statement that touched it, so rows go in as few statements as possible."""


@dataclass(frozen=True)
class _Compiled:
    """A statement as the driver takes it: its SQL with positional placeholders (``?`` for
    SQLite, ``%s`` for psycopg), where each parameter comes from (the caller's mapping, or
    the value bound in the statement), how each is stored, and how each result column is
    read back."""

    sql: str
    names: tuple[str, ...]
    fixed: Mapping[str, Any]
    binders: Mapping[str, Processor]
    row: type[tuple[Any, ...]] | None
    readers: tuple[Processor | None, ...]
    values: tuple[str, str, str] | None
    """An INSERT's SQL around its one ``VALUES`` group, and the group: ``(head, group, tail)``
    (``None``: not such an INSERT)."""

    def parameters(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        values = []
        for name in self.names:
            value = params[name] if name in params else self.fixed[name]
            binder = self.binders.get(name)
            values.append(value if binder is None or value is None else binder(value))
        return tuple(values)

    def read(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        assert self.row is not None
        values = (r(v) if r is not None else v for r, v in zip(self.readers, raw, strict=True))
        return self.row(*values)


def _row_type(names: list[str]) -> type[tuple[Any, ...]]:
    # Rows read as SQLAlchemy's are: by attribute (``row.pk``) or by name (``row._mapping``).
    base = namedtuple("Row", names)  # type: ignore[misc]
    mapping = property(lambda row: row._asdict())
    return type("Row", (base,), {"__slots__": (), "_mapping": mapping})


def _compile(statement: Executable, dialect: Dialect, columns: Sequence[str]) -> _Compiled | None:
    """The statement for the driver; ``None`` when its SQL depends on its values."""
    element = cast(ClauseElement, statement)
    if columns:
        # An INSERT's SQL names the columns its rows bind, as SQLAlchemy's does.
        compiled = element.compile(dialect=dialect, column_keys=list(columns))
    else:
        compiled = element.compile(dialect=dialect)
    assert isinstance(compiled, SQLCompiler)
    varying = compiled.literal_execute_params or compiled.post_compile_params
    defaulted = compiled.insert_prefetch or compiled.update_prefetch
    sql, order = compiled.string, compiled.positiontup
    if order is None and dialect.paramstyle == "pyformat":
        sql, order = _positional(sql)
    if order is None or varying or defaulted:
        return None
    fixed: dict[str, Any] = {}
    binders: dict[str, Processor] = {}
    for bind, name in compiled.bind_names.items():
        if bind.callable is not None:
            return None
        if not bind.required:
            fixed[name] = bind.value
        processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if processor is not None:
            binders[name] = processor
    exported = list(getattr(statement, "exported_columns", ()))
    names = [c.key for c in exported]
    if len(set(names)) != len(names):
        return None
    row = _row_type(names) if exported else None
    readers = tuple(c.type.dialect_impl(dialect).result_processor(dialect, None) for c in exported)
    span = _values_group(sql, len(order))
    values = None if span is None else (sql[: span[0]], sql[span[0] : span[1]], sql[span[1] :])
    return _Compiled(sql, tuple(order), fixed, binders, row, readers, values)


_PYFORMAT = re.compile(r"%%|%\((\w+)\)s")


def _positional(sql: str) -> tuple[str, list[str]]:
    """psycopg's named placeholders (``%(name)s``) as positional ones (``%s``) and the names
    in their order: one form for both drivers, so a multi-row INSERT repeats its group."""
    names: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return match.group(0)  # an escaped percent sign stays escaped
        names.append(match.group(1))
        return "%s"

    return _PYFORMAT.sub(placeholder, sql), names


def _values_group(sql: str, binds: int) -> tuple[int, int] | None:
    """Where the one parenthesised group of an ``INSERT ... VALUES (...)`` is in ``sql``, the
    group binding all ``binds`` parameters (``None``: no such group)."""
    found = sql.find(" VALUES (")
    if found < 0 or sql.find(" VALUES (", found + 1) >= 0:
        return None
    start = found + len(" VALUES ")
    depth = 0
    for end in range(start, len(sql)):
        depth += (sql[end] == "(") - (sql[end] == ")")
        if depth == 0:
            group = sql[start : end + 1]
            return (start, end + 1) if group.count("?") + group.count("%s") == binds else None
    return None


@dataclass(frozen=True)
class Announced:
    """The execution context ``before_cursor_execute`` listeners get for a statement run
    here: its parameters by name, one mapping a row, as SQLAlchemy's context names them."""

    compiled_parameters: Sequence[Mapping[str, Any]]


class _Disconnected(Exception):
    """The driver lost its server: SQLAlchemy must see the statement fail on its own path,
    where it invalidates the pool's connections as it does for its own statements."""


def _run(
    connection: Connection,
    sql: str,
    params: tuple[Any, ...],
    named: Callable[[], Sequence[Mapping[str, Any]]],
    *,
    fetch: bool = True,
) -> list[Any]:
    dialect = connection.dialect
    driver = connection.connection.driver_connection
    cursor = driver.cursor()  # type: ignore[union-attr]
    try:
        # The engine's listeners: the connection's own dispatcher is rebuilt on each access.
        for listener in connection.engine.dispatch.before_cursor_execute:
            listener(connection, cursor, sql, params, Announced(named()), False)
        cursor.execute(sql, params)
        # An INSERT's rows are all written at its first step; reading the rows its RETURNING
        # gives would be one more step each, and one more release of the GIL. psycopg cannot
        # fetch a result without columns (sqlite3 gives no rows), and asking its
        # ``description`` builds an object a column: its result is asked instead.
        if not fetch or (dialect.driver == "psycopg" and not cursor.pgresult.nfields):
            return []
        rows: list[Any] = cursor.fetchall()
        return rows
    except Exception as exc:
        errors = dialect.loaded_dbapi.Error
        if not isinstance(exc, errors):
            raise
        if dialect.is_disconnect(exc, driver, cursor):
            raise _Disconnected from exc
        raise DBAPIError.instance(sql, params, exc, errors) from exc
    finally:
        cursor.close()


_DRIVERS = {"sqlite": "pysqlite", "postgresql": "psycopg"}


def _on_driver(connection: Connection) -> bool:
    # Outside a transaction SQLAlchemy begins one before the statement (autobegin): a
    # statement sent straight to the driver would run on its own, outside any snapshot.
    dialect = connection.dialect
    return _DRIVERS.get(dialect.name) == dialect.driver and connection.in_transaction()


def sqlite_rows(connection: Connection, sql: str, params: Mapping[str, Any]) -> list[Any]:
    """The rows of ``sql`` (SQLite, ``:name`` placeholders) as plain tuples, run on the
    driver inside the connection's transaction, for a statement built per call that may
    return thousands of rows (SQLAlchemy's result rows cost several microseconds each).
    Outside a transaction it goes through SQLAlchemy. Raises SQLAlchemy's errors."""
    if not _on_driver(connection) or connection.dialect.name != "sqlite":
        return [tuple(row) for row in connection.exec_driver_sql(sql, dict(params))]
    try:
        return _run(connection, sql, params, lambda: [params])  # type: ignore[arg-type]
    except _Disconnected:
        return [tuple(row) for row in connection.exec_driver_sql(sql, dict(params))]


class FastStatement:
    """One statement (a ``select``, or an ``insert``/``update``/``delete`` with or without
    ``returning``), run on the driver where it can be; see the module. ``postgresql``: the
    statement PostgreSQL runs instead, when the two differ."""

    def __init__(self, statement: Executable, *, postgresql: Executable | None = None) -> None:
        self.statement = statement
        self._postgresql = postgresql if postgresql is not None else statement
        self._compiled: weakref.WeakKeyDictionary[
            Dialect, dict[tuple[str, ...], _Compiled | None]
        ] = weakref.WeakKeyDictionary()

    def _for(self, dialect: Dialect, columns: tuple[str, ...] = ()) -> _Compiled | None:
        shapes = self._compiled.get(dialect)
        if shapes is None:
            shapes = self._compiled.setdefault(dialect, {})
        if columns not in shapes:
            shapes[columns] = _compile(self._of(dialect), dialect, columns)
        return shapes[columns]

    def _of(self, dialect: Dialect) -> Executable:
        return self._postgresql if dialect.name == "postgresql" else self.statement

    def _through_sqlalchemy(self, connection: Connection, params: Any) -> list[Any]:
        result = connection.execute(self._of(connection.dialect), params)
        return list(result) if result.returns_rows else []

    def rows(self, connection: Connection, params: Mapping[str, Any]) -> list[Any]:
        """Every row, each with its columns as attributes (SQLAlchemy's rows on SQLAlchemy's
        path). Raises SQLAlchemy's errors."""
        compiled = self._for(connection.dialect) if _on_driver(connection) else None
        if compiled is None:
            return self._through_sqlalchemy(connection, params)
        named = partial(_merged, compiled.fixed, params)
        try:
            raw = _run(connection, compiled.sql, compiled.parameters(params), named)
        except _Disconnected:
            return self._through_sqlalchemy(connection, params)
        return [compiled.read(r) for r in raw] if compiled.row is not None else []

    def first(self, connection: Connection, params: Mapping[str, Any]) -> Any | None:
        """The first row, or ``None``."""
        found = self.rows(connection, params)
        return found[0] if found else None

    def one(self, connection: Connection, params: Mapping[str, Any]) -> Any:
        """The one row; raises SQLAlchemy's ``NoResultFound`` or ``MultipleResultsFound``
        otherwise, as ``Result.one()`` does."""
        found = self.rows(connection, params)
        if not found:
            raise NoResultFound("No row was found when one was required")
        if len(found) > 1:
            raise MultipleResultsFound("Multiple rows were found when exactly one was required")
        return found[0]

    def scalars(self, connection: Connection, params: Mapping[str, Any]) -> list[Any]:
        """The first column of every row."""
        return [row[0] for row in self.rows(connection, params)]

    def execute(self, connection: Connection, params: Mapping[str, Any]) -> None:
        """Run it for its effect (rows it returns are dropped)."""
        self.rows(connection, params)

    def insert_rows(self, connection: Connection, values: Sequence[Mapping[str, Any]]) -> None:
        """Run this INSERT for ``values`` (one mapping a row, every one naming the same
        columns) in multi-row statements, as SQLAlchemy's "insertmanyvalues" does; rows a
        ``RETURNING`` gives are not read. Raises SQLAlchemy's errors."""
        if not values:
            return
        columns = tuple(values[0])
        compiled = self._for(connection.dialect, columns) if _on_driver(connection) else None
        if compiled is None or compiled.values is None:
            connection.execute(self._of(connection.dialect), list(values)).close()
            return
        per = max(1, min(INSERT_CHUNK_ROWS, MAX_VALUES // len(compiled.names)))
        head, group, tail = compiled.values
        try:
            for start in range(0, len(values), per):
                chunk = values[start : start + per]
                sql = f"{head}{', '.join([group] * len(chunk))}{tail}"
                params = tuple(v for row in chunk for v in compiled.parameters(row))
                _run(connection, sql, params, partial(list, chunk), fetch=False)
        except _Disconnected:
            connection.execute(self._of(connection.dialect), list(values)).close()


def _merged(fixed: Mapping[str, Any], params: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{**fixed, **params}]
