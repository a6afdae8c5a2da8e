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

Everything else goes through SQLAlchemy as before: PostgreSQL, a statement whose SQL depends
on its parameters (expanding ``IN`` lists, Python-side defaults), and any engine with a
``before_cursor_execute`` or ``after_cursor_execute`` listener (tracing, or a benchmark that
counts statements), so those listeners still see every statement. A driver error is raised as
the SQLAlchemy error SQLAlchemy would have raised, for the unit of work to translate.
"""

from __future__ import annotations

import sqlite3
import weakref
from collections import namedtuple
from collections.abc import Callable, Mapping
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
_PREPARED: weakref.WeakKeyDictionary[Dialect, dict[int, tuple[Executable, _Prepared | None]]] = (
    weakref.WeakKeyDictionary()
)


def _prepare(statement: Executable, dialect: Dialect) -> _Prepared | None:
    if not isinstance(statement, ClauseElement):
        return None
    compiled = statement.compile(dialect=dialect)
    if not isinstance(compiled, SQLCompiler) or not compiled.positional:
        return None
    if (
        compiled.literal_execute_params
        or compiled.post_compile_params
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
    binds: list[_Processor] = []
    for name in compiled.positiontup:
        process = processors.get(name)
        if process is not None and not callable(process):
            return None  # a tuple-valued parameter
        binds.append(process)
    row_type: Any = None
    results: tuple[_Processor, ...] = ()
    columns = compiled._result_columns
    if columns:
        names = [column[0] for column in columns]
        if len(set(names)) != len(names):
            return None
        row_type = _row_type(names)
        results = tuple(column[3]._cached_result_processor(dialect, None) for column in columns)
    return _Prepared(compiled.string, tuple(keys), defaults, tuple(binds), row_type, results)


def _prepared(connection: Connection, statement: Executable) -> _Prepared | None:
    dialect = connection.dialect
    if dialect.name != "sqlite":
        return None
    dispatch = connection.dispatch
    if dispatch.before_cursor_execute or dispatch.after_cursor_execute:
        return None
    cache = _PREPARED.get(dialect)
    if cache is None:
        cache = _PREPARED.setdefault(dialect, {})
    found = cache.get(id(statement))
    if found is None or found[0] is not statement:
        found = (statement, _prepare(statement, dialect))
        cache[id(statement)] = found
    return found[1]


def _execute(
    connection: Connection, prepared: _Prepared, params: Mapping[str, Any]
) -> sqlite3.Cursor:
    values = []
    for (key, name), process in zip(prepared.keys, prepared.binds, strict=True):
        value = params.get(key, _MISSING)
        if value is _MISSING:
            value = params[name] if name in params else prepared.defaults[name]
        values.append(value if process is None else process(value))
    driver = connection.connection.driver_connection
    assert isinstance(driver, sqlite3.Connection)
    cursor = driver.cursor()
    try:
        cursor.execute(prepared.sql, values)
    except sqlite3.Error as exc:
        cursor.close()
        raise DBAPIError.instance(prepared.sql, values, exc, sqlite3.Error) from exc
    return cursor


def rows(connection: Connection, statement: Executable, params: Mapping[str, Any]) -> list[Any]:
    """Every row ``statement`` returns with ``params`` bound, by attribute or position, as
    SQLAlchemy's rows are read."""
    prepared = _prepared(connection, statement)
    if prepared is None or prepared.row is None:
        return list(connection.execute(statement, params))
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


def write(connection: Connection, statement: Executable, params: Mapping[str, Any]) -> int:
    """Run ``statement`` (one that returns no rows) with ``params`` bound; the rows it changed."""
    prepared = _prepared(connection, statement)
    if prepared is None:
        return int(connection.execute(statement, params).rowcount)
    cursor = _execute(connection, prepared, params)
    changed = cursor.rowcount
    cursor.close()
    return changed


__all__ = ["first", "one", "rows", "write"]
