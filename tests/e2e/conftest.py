"""Worker tests run on a private real Redis (never the machine's) and a SQLite store file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from om_workers.embedded_redis import EmbeddedRedis
from om_workers.redis_client import connect
from om_workers.store import SqlStore, upgrade


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def client(redis_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    conn = connect(redis_server.url)
    conn.flushdb()
    yield conn
    conn.close()


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(url)
    return url


@pytest.fixture
def store(database_url: str) -> Iterator[SqlStore]:
    instance = SqlStore.from_url(database_url)
    yield instance
    instance.close()


@pytest.fixture
def tenant(store: SqlStore) -> str:
    return store.create_tenant("acme").id
