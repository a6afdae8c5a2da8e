"""The flush path's statements straight on the SQLite driver.

SQLAlchemy's execution path costs several times what SQLite takes to run a small statement:
per execution it looks the statement up in its compiled cache (building a cache key), builds
an execution context and a result object, and runs every row through its result machinery.
A flush job runs about fifteen statements, inside the writers' queue for most of them, so
that cost is paid with every other writer waiting. :func:`rows` and :func:`write` run a
statement built once (a module constant with bound parameters) with the SQL SQLAlchemy
compiled for it, once per dialect, on the connection's own ``sqlite3`` cursor: the same SQL,
the same bound values (through the same type processors) and the same values back (through
the same result processors), in the connection's transaction.

An expanding ``IN`` list is rendered as that many ``?``, as SQLAlchemy renders it. Everything
else goes through SQLAlchemy as before: PostgreSQL, a statement whose SQL depends on its
parameters otherwise (an empty ``IN`` list, Python-side defaults), and any engine with a
``before_cursor_execute`` or ``after_cursor_execute`` listener (tracing, or a benchmark that
counts statements), so those listeners still see every statement. A driver error is raised as
the SQLAlchemy error SQLAlchemy would have raised, for the unit of work to translate.
"""

from __future__ import annotations

import sqlite3
import weakref
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, MultipleResultsFound, NoResultFound
from sqlalchemy.sql import ClauseElement, Executable
from sqlalchemy.sql.compiler import SQLCompiler

_Processor = Callable[[Any], Any] | None


@dataclass(frozen=True, slots=True)
class _Prepared:
    """One statement compiled for one dialect: its SQL, and for each ``?`` in it the key a
    caller binds it by, its value when the caller binds none, and its type's processor."""

    sql: str
    keys: tuple[tuple[str, str], ...]  # (the bound parameter's key, its compiled name)
    defaults: Mapping[str, Any]
    binds: tuple[_Processor, ...]
    row: Any  # the named tuple of a result row; None for a statement returning no rows
    results: tuple[_Processor, ...]
    # Compiled names of the expanding parameters (``IN`` lists), rendered at each execution.
    expanding: frozenset[str] = frozenset()


_MISSING = object()

# Called through a name: mypy reads ``namedtuple(...)`` as a class definition of its own.
_NAMED_TUPLE: Callable[..., Any] = namedtuple


def _row_type(names: list[str]) -> Any:
    """A row class: a named tuple with SQLAlchemy's ``Row._mapping`` (a dict here)."""
    base = _NAMED_TUPLE("Row", names, rename=True)

    class Row(base):  # type: ignore[misc,valid-type]
        __slots__ = ()

        @property
        def _mapping(self) -> dict[str, Any]:
            return dict(zip(self._fields, self, strict=True))

    return Row


# Per dialect (an engine's own settings, such as its JSON serializer, are in its processors),
# then per statement object; a statement that cannot take this path maps to None.
_PREPARED: weakref.WeakKeyDictionary[
    Dialect, dict[tuple[int, tuple[str, ...]], tuple[Executable, _Prepared | None]]
] = weakref.WeakKeyDictionary()


def _prepare(statement: Executable, dialect: Dialect, columns: tuple[str, ...]) -> _Prepared | None:
    if not isinstance(statement, ClauseElement):
        return None
    if columns:
        # An INSERT's SQL names the columns its first row binds, as SQLAlchemy's does.
        compiled = statement.compile(dialect=dialect, column_keys=list(columns))
    else:
        compiled = statement.compile(dialect=dialect)
    if not isinstance(compiled, SQLCompiler) or not compiled.positional:
        return None
    expanding = frozenset(compiled.bind_names[b] for b in compiled.post_compile_params)
    if (
        compiled.literal_execute_params
        or not all(b.expanding for b in compiled.post_compile_params)
        or compiled.insert_prefetch
        or compiled.update_prefetch
        or compiled.positiontup is None
    ):
        return None
    processors = compiled._bind_processors
    keys: list[tuple[str, str]] = []
    defaults: dict[str, Any] = {}
    by_name = {name: bind for bind, name in compiled.bind_names.items()}
    for name in compiled.positiontup:
        bind = by_name[name]
        if bind.callable is not None:
            return None
        keys.append((bind.key, name))
        if not bind.required:
            defaults[name] = bind.value
    placeholders = "VALUES (" + ", ".join("?" * len(keys)) + ")"
    if columns and compiled.string.count(placeholders) != 1:
        return None  # not one plain row of values to repeat
    binds: list[_Processor] = []
    for name in compiled.positiontup:
        process = processors.get(name)
        if process is not None and not callable(process):
            return None  # a tuple-valued parameter
        binds.append(process)
    row_type: Any = None
    results: tuple[_Processor, ...] = ()
    result_columns = compiled._result_columns
    if result_columns:
        names = [column[0] for column in result_columns]
        if len(set(names)) != len(names):
            return None
        row_type = _row_type(names)
        results = tuple(
            column[3]._cached_result_processor(dialect, None) for column in result_columns
        )
    return _Prepared(
        compiled.string, tuple(keys), defaults, tuple(binds), row_type, results, expanding
    )


def _prepared(
    connection: Connection, statement: Executable, columns: tuple[str, ...] = ()
) -> _Prepared | None:
    """The statement prepared for ``connection``'s dialect (an INSERT's for the ``columns`` its
    rows bind), ``None`` when it takes SQLAlchemy's path."""
    dialect = connection.dialect
    # Outside a transaction SQLAlchemy would begin one first (autobegin); so does its path.
    if dialect.name != "sqlite" or not connection.in_transaction():
        return None
    # The engine's listeners (a Connection's own would be missed: none are registered here);
    # a Connection's joined dispatcher costs more to ask than the engine's.
    dispatch = connection.engine.dispatch
    if dispatch.before_cursor_execute or dispatch.after_cursor_execute:
        return None
    cache = _PREPARED.get(dialect)
    if cache is None:
        cache = _PREPARED.setdefault(dialect, {})
    key = (id(statement), columns)
    found = cache.get(key)
    if found is None or found[0] is not statement:
        found = (statement, _prepare(statement, dialect, columns))
        cache[key] = found
    return found[1]


def _value(prepared: _Prepared, key: str, name: str, params: Mapping[str, Any]) -> Any:
    value = params.get(key, _MISSING)
    if value is _MISSING:
        value = params[name] if name in params else prepared.defaults[name]
    return value


def _bound(prepared: _Prepared, params: Mapping[str, Any]) -> list[Any]:
    """The values for the statement's ``?``, in order, through their types' processors."""
    values = []
    for (key, name), process in zip(prepared.keys, prepared.binds, strict=True):
        value = _value(prepared, key, name, params)
        values.append(value if process is None else process(value))
    return values


def _expanded(prepared: _Prepared, params: Mapping[str, Any]) -> tuple[str, list[Any]] | None:
    """The SQL with each ``IN`` list rendered as that many ``?``, and its values; ``None`` for
    an empty list (SQLAlchemy renders an empty set its own way)."""
    sql = prepared.sql
    values: list[Any] = []
    for (key, name), process in zip(prepared.keys, prepared.binds, strict=True):
        value = _value(prepared, key, name, params)
        if name not in prepared.expanding:
            values.append(value if process is None else process(value))
            continue
        items = list(value)
        if not items:
            return None
        sql = sql.replace(f"__[POSTCOMPILE_{name}]", ", ".join("?" * len(items)), 1)
        values.extend(items if process is None else [process(v) for v in items])
    return sql, values


def _run(connection: Connection, sql: str, values: list[Any]) -> sqlite3.Cursor:
    driver = connection.connection.driver_connection
    assert isinstance(driver, sqlite3.Connection)
    cursor = driver.cursor()
    try:
        cursor.execute(sql, values)
    except sqlite3.Error as exc:
        cursor.close()
        raise DBAPIError.instance(sql, values, exc, sqlite3.Error) from exc
    return cursor


def _execute(
    connection: Connection, prepared: _Prepared, params: Mapping[str, Any]
) -> sqlite3.Cursor:
    return _run(connection, prepared.sql, _bound(prepared, params))


def rows(connection: Connection, statement: Executable, params: Mapping[str, Any]) -> list[Any]:
    """Every row ``statement`` returns with ``params`` bound, by attribute or position, as
    SQLAlchemy's rows are read."""
    prepared = _prepared(connection, statement)
    if prepared is None or prepared.row is None:
        return list(connection.execute(statement, params))
    if prepared.expanding:
        rendered = _expanded(prepared, params)
        if rendered is None:
            return list(connection.execute(statement, params))
        cursor = _run(connection, *rendered)
    else:
        cursor = _execute(connection, prepared, params)
    try:
        fetched = cursor.fetchall()
    except sqlite3.Error as exc:
        raise DBAPIError.instance(prepared.sql, (), exc, sqlite3.Error) from exc
    finally:
        cursor.close()
    make, processors = prepared.row._make, prepared.results
    return [
        make([v if p is None else p(v) for v, p in zip(raw, processors, strict=True)])
        for raw in fetched
    ]


def first(connection: Connection, statement: Executable, params: Mapping[str, Any]) -> Any:
    """The first row ``statement`` returns (see :func:`rows`), ``None`` when it returns none."""
    found = rows(connection, statement, params)
    return found[0] if found else None


def one(connection: Connection, statement: Executable, params: Mapping[str, Any]) -> Any:
    """The one row ``statement`` returns (see :func:`rows`); raises SQLAlchemy's
    ``NoResultFound`` or ``MultipleResultsFound`` otherwise, as ``Result.one()`` does."""
    found = rows(connection, statement, params)
    if len(found) != 1:
        if not found:
            raise NoResultFound("No row was found when one was required")
        raise MultipleResultsFound("Multiple rows were found when exactly one was required")
    return found[0]


# SQLite binds at most 32,766 values a statement; SQLAlchemy sends at most 1,000 rows.
_MAX_VALUES = 32_000
_MAX_ROWS = 1_000


def insert_rows(
    connection: Connection, statement: Executable, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Insert ``rows`` (each binding the same columns) with the INSERT ``statement``, as
    SQLAlchemy's "insertmanyvalues" does: many rows a statement (up to 1,000), not a statement
    a row. Rows a ``RETURNING`` clause returns are not read: SQLite makes every change of an
    INSERT at its first step, and each row read is one more step (one more release of the GIL
    inside the writers' queue)."""
    if not rows:
        return
    columns = tuple(rows[0])
    prepared = _prepared(connection, statement, columns)
    if prepared is None or prepared.expanding:
        connection.execute(statement, list(rows)).close()
        return
    one = "(" + ", ".join("?" * len(prepared.keys)) + ")"  # checked by _prepare
    per = max(1, min(_MAX_ROWS, _MAX_VALUES // max(1, len(prepared.keys))))
    for start in range(0, len(rows), per):
        chunk = rows[start : start + per]
        sql = prepared.sql.replace(one, ", ".join([one] * len(chunk)), 1)
        values = [v for row in chunk for v in _bound(prepared, row)]
        _run(connection, sql, values).close()


def write(connection: Connection, statement: Executable, params: Mapping[str, Any]) -> int:
    """Run ``statement`` (one that returns no rows) with ``params`` bound; the rows it changed."""
    prepared = _prepared(connection, statement)
    if prepared is None or prepared.expanding:
        return int(connection.execute(statement, params).rowcount)
    cursor = _execute(connection, prepared, params)
    changed = cursor.rowcount
    cursor.close()
    return changed


__all__ = ["first", "insert_rows", "one", "rows", "write"]
