"""Fixtures: one private Redis per session, one live API (uvicorn thread) per test module:
``api`` on SQLite, ``backend_api`` on each backend (SQLite, and PostgreSQL when
``OM_TEST_DATABASE_URL`` is set; see ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from om_workers.config import Settings
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import SqlStore, upgrade
from tests.api.server import ADMIN_TOKEN, METRICS_TOKEN, LiveApi, Published, serve
from tests.conftest import BACKENDS, fresh_database

MAX_BODY_BYTES = 256 * 1024


@pytest.fixture(scope="session")
def api_redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


def make_settings(database_url: str, redis_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        redis_url=redis_url,
        admin_token=ADMIN_TOKEN,
        metrics_token=METRICS_TOKEN,
        max_body_bytes=MAX_BODY_BYTES,
    )


@pytest.fixture(scope="module")
def api(
    api_redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveApi]:
    database_url = f"sqlite:///{tmp_path_factory.mktemp('api') / 'om.db'}"
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    client: redis.Redis = connect(api_redis_server.url)
    client.flushdb()
    with serve(
        make_settings(database_url, api_redis_server.url), store, client, Published()
    ) as live:
        yield live
    client.close()
    store.close()


@pytest.fixture(scope="module", params=BACKENDS)
def backend_api(
    request: pytest.FixtureRequest,
    api_redis_server: EmbeddedRedis,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LiveApi]:
    """A live API on a fresh database of each backend (a SQLite file, a PostgreSQL schema).

    Redis is not flushed: another module's live API may still be running on it, and every
    key is per tenant, which each test creates afresh."""
    with fresh_database(request.param, tmp_path_factory.mktemp("api")) as database_url:
        upgrade(database_url)
        store = SqlStore.from_url(database_url)
        client: redis.Redis = connect(api_redis_server.url)
        try:
            with serve(
                make_settings(database_url, api_redis_server.url),
                store,
                client,
                Published(),
                backend=request.param,
            ) as live:
                yield live
        finally:
            client.close()
            store.close()


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(url)
    return url
