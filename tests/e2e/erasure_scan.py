"""Where erased text could hide, searched byte for byte: every file of a data folder, every row
of every table (as text), every Redis key and value."""

from __future__ import annotations

from pathlib import Path

import redis
from sqlalchemy import Connection, inspect, text

from om_workers.store.engine import create_store_engine


def files_holding(root: Path, needle: str) -> list[str]:
    """Files under ``root`` whose bytes contain ``needle`` (UTF-8), as paths relative to it."""
    wanted = needle.encode()
    return sorted(
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file() and wanted in path.read_bytes()
    )


def tables_holding(database_url: str, needle: str) -> list[str]:
    """Tables of the database with a row whose text form contains ``needle``."""
    engine = create_store_engine(database_url)
    found = []
    try:
        with engine.connect() as connection:
            unscannable = _fts5_tables(connection)
            for table in inspect(connection).get_table_names():
                if table in unscannable:
                    continue
                if connection.dialect.name == "postgresql":
                    query = text(f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE :pattern')
                    hits = connection.execute(query, {"pattern": f"%{needle}%"}).scalar()
                else:
                    rows = connection.execute(text(f'SELECT * FROM "{table}"')).all()
                    hits = sum(needle in repr(tuple(row)) for row in rows)
                if hits:
                    found.append(table)
    finally:
        engine.dispose()
    return found


def _fts5_tables(connection: Connection) -> set[str]:
    """SQLite's FTS5 tables: with no content and no column sizes they have no rows to scan
    (FTS5 refuses), and their index lies in their shadow tables (``_data``, ``_idx``), which
    are scanned as tables."""
    if connection.dialect.name != "sqlite":
        return set()
    query = "SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE % USING fts5(%'"
    return set(connection.execute(text(query)).scalars())


def redis_holding(client: redis.Redis, needle: str) -> list[str]:
    """Keys whose name, serialized value (``DUMP``) or readable value holds ``needle``."""
    wanted = needle.encode()
    found = []
    where = client.connection_pool.connection_kwargs
    raw = redis.Redis(host=where["host"], port=where["port"], db=where.get("db", 0))
    try:
        for key in raw.scan_iter(count=500):
            if _holds(raw, key, wanted):
                found.append(key.decode(errors="replace"))
    finally:
        raw.close()
    return found


def _readable(client: redis.Redis, key: bytes) -> bytes:
    """The key's value as its type reads it (DUMP alone may hold it compressed)."""
    kind = client.type(key)
    if kind == b"string":
        return client.get(key) or b""
    if kind == b"hash":
        return b" ".join(k + b" " + v for k, v in client.hgetall(key).items())
    if kind == b"list":
        return b" ".join(client.lrange(key, 0, -1))
    if kind == b"set":
        return b" ".join(client.smembers(key))
    if kind == b"zset":
        return b" ".join(client.zrange(key, 0, -1))
    return b""


def _holds(client: redis.Redis, key: bytes, wanted: bytes) -> bool:
    dumped = client.dump(key) or b""
    return any(wanted in part for part in (key, dumped, _readable(client, key)))
