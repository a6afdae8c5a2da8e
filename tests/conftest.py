"""Fixtures every suite shares: one private, real Redis server per test run (never the
machine's), and a client on it that starts each test on an empty database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from om_workers.embedded_redis import EmbeddedRedis
from om_workers.redis_client import connect


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
