"""The serving path's hottest statements, run on SQLite's driver cursor.

Through SQLAlchemy a statement costs about 20 microseconds of Python around the driver's own
work (cache key, execution context, result object): 21-26 us against 2-4 us for a one-row
read of the ``sessions`` table, several times a request. A :class:`FastStatement` is compiled
once per dialect by SQLAlchemy itself (the same SQL, the same bind and result processing of
datetimes and JSON) and then runs on the connection's DBAPI connection, inside the
transaction the connection already holds (a unit of work begins it). On PostgreSQL it runs
through SQLAlchemy as any statement does.

Every listener of the engine's ``before_cursor_execute`` still sees each statement (the
statement-count tests and benchmarks rely on it), and a driver error is wrapped as
SQLAlchemy wraps it, so the store's error translation is unchanged.
"""

from __future__ import annotations

import sqlite3
import weakref
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from sqlalchemy import Connection, Table
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement, Executable
from sqlalchemy.sql.compiler import SQLCompiler

Processor = Callable[[Any], Any]

INSERT_CHUNK_ROWS = 1000
"""Rows per multi-row INSERT: SQLite's FTS5 writes a segment per statement that touched it,
so rows go in as few statements as the variable limit allows (1,000 rows of 10 columns is
far below SQLite's 32,766)."""


@dataclass(frozen=True)
class _Compiled:
    """A statement as SQLite's driver takes it: positional SQL, where each parameter comes
    from (the caller's mapping, or the value bound in the statement), how each is stored,
    and how each result column is read back."""

    sql: str
    names: tuple[str, ...]
    fixed: Mapping[str, Any]
    binders: Mapping[str, Processor]
    row: type[tuple[Any, ...]] | None
    readers: tuple[Processor | None, ...]

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


def _compile(statement: Executable, dialect: Dialect) -> _Compiled:
    compiled = cast(ClauseElement, statement).compile(dialect=dialect)
    assert isinstance(compiled, SQLCompiler)
    expanding = compiled.literal_execute_params or compiled.post_compile_params
    if compiled.positiontup is None or expanding:
        raise ValueError("a fast statement needs plain positional parameters")
    fixed: dict[str, Any] = {}
    binders: dict[str, Processor] = {}
    for bind, name in compiled.bind_names.items():
        if not bind.required:
            fixed[name] = bind.effective_value
        processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if processor is not None:
            binders[name] = processor
    columns = list(getattr(statement, "exported_columns", ()))
    row = _row_type([c.key for c in columns]) if columns else None
    readers = tuple(c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns)
    return _Compiled(compiled.string, tuple(compiled.positiontup), fixed, binders, row, readers)


def _driver(connection: Connection) -> Any:
    return connection.connection.driver_connection


@dataclass(frozen=True)
class Announced:
    """The execution context ``before_cursor_execute`` listeners get for a statement run
    here: its parameters by name, one mapping a row, as SQLAlchemy's context names them."""

    compiled_parameters: Sequence[Mapping[str, Any]]


def _run(
    connection: Connection,
    sql: str,
    params: tuple[Any, ...],
    named: Callable[[], Sequence[Mapping[str, Any]]],
) -> list[Any]:
    cursor = _driver(connection).cursor()
    try:
        # The engine's listeners: the connection's own dispatcher is rebuilt on each access.
        for listener in connection.engine.dispatch.before_cursor_execute:
            listener(connection, cursor, sql, params, Announced(named()), False)
        return cursor.execute(sql, params).fetchall()  # type: ignore[no-any-return]
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, params, exc, sqlite3.Error) from exc
    finally:
        cursor.close()


class FastStatement:
    """One statement (a ``select``, or an ``update``/``delete`` with or without
    ``returning``) with named bound parameters and no expanding ones; see the module.
    ``postgresql``: the statement PostgreSQL runs instead, when the two differ."""

    def __init__(self, statement: Executable, *, postgresql: Executable | None = None) -> None:
        self.statement = statement
        self._postgresql = postgresql if postgresql is not None else statement
        self._compiled: weakref.WeakKeyDictionary[Dialect, _Compiled] = weakref.WeakKeyDictionary()

    def _for(self, dialect: Dialect) -> _Compiled:
        compiled = self._compiled.get(dialect)
        if compiled is None:
            compiled = self._compiled[dialect] = _compile(self.statement, dialect)
        return compiled

    def rows(self, connection: Connection, params: Mapping[str, Any]) -> list[Any]:
        """Every row, each with its columns as attributes (SQLAlchemy's rows on PostgreSQL).
        Raises SQLAlchemy's errors."""
        if connection.dialect.name != "sqlite":
            result = connection.execute(self._postgresql, params)
            return list(result) if result.returns_rows else []
        compiled = self._for(connection.dialect)
        named = lambda: [{**compiled.fixed, **params}]  # noqa: E731
        raw = _run(connection, compiled.sql, compiled.parameters(params), named)
        return [compiled.read(r) for r in raw] if compiled.row is not None else []

    def first(self, connection: Connection, params: Mapping[str, Any]) -> Any | None:
        """The first row, or ``None``."""
        found = self.rows(connection, params)
        return found[0] if found else None

    def scalars(self, connection: Connection, params: Mapping[str, Any]) -> list[Any]:
        """The first column of every row."""
        return [row[0] for row in self.rows(connection, params)]

    def execute(self, connection: Connection, params: Mapping[str, Any]) -> None:
        """Run it for its effect (rows it returns are dropped)."""
        self.rows(connection, params)


def insert_rows(connection: Connection, table: Table, values: Sequence[Mapping[str, Any]]) -> None:
    """Insert ``values`` (one mapping a row, every one naming the same columns) in multi-row
    statements of :data:`INSERT_CHUNK_ROWS` rows, on SQLite's driver (see the module); on
    PostgreSQL through SQLAlchemy. Raises SQLAlchemy's errors."""
    if not values:
        return
    if connection.dialect.name != "sqlite":
        connection.execute(table.insert(), list(values))
        return
    names = list(values[0])
    columns = [table.c[name] for name in names]
    dialect = connection.dialect
    binders = [c.type.dialect_impl(dialect).bind_processor(dialect) for c in columns]
    quoted = ", ".join(dialect.identifier_preparer.format_column(c) for c in columns)
    group = "(" + ", ".join("?" * len(names)) + ")"
    head = f"INSERT INTO {dialect.identifier_preparer.format_table(table)} ({quoted}) VALUES "
    for start in range(0, len(values), INSERT_CHUNK_ROWS):
        chunk = values[start : start + INSERT_CHUNK_ROWS]
        params = tuple(
            value if binder is None or value is None else binder(value)
            for row in chunk
            for binder, value in zip(binders, (row[n] for n in names), strict=True)
        )
        _run(connection, head + ", ".join([group] * len(chunk)), params, partial(list, chunk))
