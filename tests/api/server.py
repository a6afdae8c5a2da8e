"""A live API for tests: uvicorn in a background thread on 127.0.0.1 (an OS-chosen port)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import redis
import uvicorn
from fastapi import APIRouter

from om_api.server.app import create_app
from om_workers.config import Settings
from om_workers.store import AccountStore, SqlStore

ADMIN_TOKEN = "admin-token-for-tests-0123456789"
METRICS_TOKEN = "metrics-token-for-tests-9876543210"
START_TIMEOUT_S = 10.0


@dataclass
class Published:
    """A recording ``publish``: every (tenant, session, job) the API asked to send, and every
    erasure job id it asked ``om.erase`` for."""

    calls: list[tuple[str, str, str]] = field(default_factory=list)
    erasures: list[str] = field(default_factory=list)

    def __call__(self, tenant_id: str, session_id: str, job_id: str) -> None:
        self.calls.append((tenant_id, session_id, job_id))


@dataclass
class LiveApi:
    """A running API: its base URL, store, Redis client, recorded publishes and backend."""

    url: str
    store: SqlStore
    redis: redis.Redis
    published: Published
    backend: str = "sqlite"

    @property
    def accounts(self) -> AccountStore:
        """Tenants and keys, on the store's engine."""
        return AccountStore(self.store.engine)

    def admin(self) -> httpx.Client:
        """A client carrying the admin token."""
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30
        )

    def scraper(self) -> httpx.Client:
        """A client carrying the metrics token (what Prometheus sends)."""
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30
        )

    def anonymous(self) -> httpx.Client:
        """A client without credentials."""
        return httpx.Client(base_url=self.url, timeout=30)

    def tenant(self, name: str | None = None) -> tuple[str, httpx.Client]:
        """A new tenant (through the admin routes) and a client with its API key."""
        tenant_id = name or f"t-{uuid.uuid4().hex[:10]}"
        with self.admin() as admin:
            assert admin.post("/v1/admin/tenants", json={"id": tenant_id}).status_code == 201
            answer = admin.post(f"/v1/admin/tenants/{tenant_id}/keys", json={"label": "test"})
            assert answer.status_code == 201, answer.text
            key = answer.json()["key"]
        client = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        return tenant_id, client


@contextmanager
def serve(
    settings: Settings,
    store: SqlStore,
    client: redis.Redis,
    published: Published,
    *,
    publish: Callable[[str, str, str], None] | None = None,
    backend: str = "sqlite",
    routers: Sequence[APIRouter] = (),
) -> Iterator[LiveApi]:
    """Run the app under uvicorn in a thread until the block ends; ``publish`` replaces the
    recording publisher (``published`` then stays empty); ``routers`` are mounted too (test
    routes that reach the real store in ways no public route does)."""
    app = create_app(
        settings,
        store=store,
        redis=client,
        publish=publish or published,
        publish_erasure=published.erasures.append,
    )
    for router in routers:
        app.include_router(router)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="om-api-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield LiveApi(f"http://127.0.0.1:{port}", store, client, published, backend)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
