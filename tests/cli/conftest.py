"""Fixtures: a live API (uvicorn thread, real Redis and SQLite) with one tenant's key."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from om_workers.config import Settings
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import SqlStore, upgrade
from tests.api.server import ADMIN_TOKEN, METRICS_TOKEN, LiveApi, Published, serve


@dataclass(frozen=True)
class Tenant:
    api: LiveApi
    tenant_id: str
    key: str


@pytest.fixture(scope="module")
def live_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApi]:
    database_url = f"sqlite:///{tmp_path_factory.mktemp('cli-api') / 'om.db'}"
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    with EmbeddedRedis() as server:
        client: redis.Redis = connect(server.url)
        settings = Settings(
            database_url=database_url,
            redis_url=server.url,
            admin_token=ADMIN_TOKEN,
            metrics_token=METRICS_TOKEN,
        )
        with serve(settings, store, client, Published()) as live:
            yield live
        client.close()
    store.close()


@pytest.fixture
def tenant(live_api: LiveApi) -> Tenant:
    tenant_id = f"t-{uuid.uuid4().hex[:10]}"
    live_api.accounts.create_tenant(tenant_id)
    return Tenant(live_api, tenant_id, live_api.accounts.create_api_key(tenant_id).plaintext)
