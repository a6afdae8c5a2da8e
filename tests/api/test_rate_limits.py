"""Per-key rate limits through the live API: exactly the burst passes, the next request is a
429 with ``Retry-After`` and writes nothing, waiting that long is enough, other keys and classes
are unaffected, two API replicas share one budget in Redis, an admin override takes effect,
and with Redis down the limiter fails open.

No assertion depends on how fast the machine is. Where a request must be refused right after a
burst, the tenant's limit refills once every 100 s (an override), so a slow burst is still one
burst. Where a refusal is needed at the 1/s default (to wait out its ``Retry-After``), requests
are sent all at once from many threads, round after round, until one is refused: a round goes
unrefused only if its requests reach the limiter spread over more seconds than there are
requests beyond the burst. At 1/s the bucket is never more than a second from admitting the
next request, so after any round a one-second wait is enough, however long the round took.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
import redis

from om_api.client import OMClient, RateLimited, RetryPolicy
from om_workers.config import Settings
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis, free_port
from om_workers.store import SqlStore, upgrade
from tests.api.conftest import make_settings
from tests.api.seed import conversation
from tests.api.server import ADMIN_TOKEN, LiveApi, Published, serve

APPENDS_BURST = 2
READS_BURST = 6


def _settings(database_url: str, redis_url: str) -> Settings:
    # 1/s: a refused request waits at most a second, so Retry-After is exactly 1.
    return make_settings(database_url, redis_url).model_copy(
        update={
            "rate_limits_enabled": True,
            "rate_appends_per_s": 1.0,
            "rate_appends_burst": APPENDS_BURST,
            "rate_flushes_per_s": 1.0,
            "rate_flushes_burst": 1,
            "rate_reads_per_s": 1.0,
            "rate_reads_burst": READS_BURST,
            "rate_limit_cache_s": 0.0,
        }
    )


@pytest.fixture(scope="module")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('rate') / 'om.db'}"
    upgrade(url)
    return url


@pytest.fixture(scope="module")
def limited(database_url: str, api_redis_server: EmbeddedRedis) -> Iterator[LiveApi]:
    """A live API with small limits."""
    yield from _serve(database_url, api_redis_server.url)


@pytest.fixture(scope="module")
def replica(database_url: str, api_redis_server: EmbeddedRedis) -> Iterator[LiveApi]:
    """A second API process on the same database and Redis as ``limited``."""
    yield from _serve(database_url, api_redis_server.url)


def _serve(database_url: str, redis_url: str) -> Iterator[LiveApi]:
    store = SqlStore.from_url(database_url)
    client: redis.Redis = connect(redis_url)
    try:
        with serve(_settings(database_url, redis_url), store, client, Published()) as live:
            yield live
    finally:
        client.close()
        store.close()


def _key_client(api: LiveApi, client: httpx.Client) -> httpx.Client:
    """A client of ``api`` with the same API key as ``client``."""
    return httpx.Client(base_url=api.url, headers=dict(client.headers), timeout=30)


def _append(client: httpx.Client, tenant_id: str, n: int) -> httpx.Response:
    entry = conversation(1, prefix=f"{tenant_id}-{n}-")
    return client.post("/v1/sessions/s/entries", json={"entries": entry})


def _new_tenant(api: LiveApi) -> tuple[str, httpx.Client]:
    tenant_id, client = api.tenant(f"t-{uuid.uuid4().hex[:10]}")
    assert client.post("/v1/sessions", json={"id": "s"}).status_code == 201
    return tenant_id, client


def _entry_count(api: LiveApi, tenant_id: str) -> int:
    return api.store.get_session(tenant_id, "s").entry_count


SLOW_RATE_PER_S = 0.01
"""One request back every 100 s: no refill while a test's burst runs, however slow."""
ROUND_SIZE = 12
"""Requests sent at once in a round at the 1/s default: the round is refused at least once
unless they reach the limiter spread over ``ROUND_SIZE - burst`` seconds or more."""
MAX_ROUNDS = 10

T = TypeVar("T")


def _slow(api: LiveApi, tenant_id: str, request_class: str, burst: int) -> None:
    """Give the tenant a limit of ``burst`` requests of the class, refilled every 100 s."""
    limit = {request_class: {"rate_per_s": SLOW_RATE_PER_S, "burst": burst}}
    with api.admin() as admin:
        path = f"/v1/admin/tenants/{tenant_id}/limits"
        assert admin.put(path, json=limit).status_code == 200


def _round(send: Callable[[int], T], first: int) -> list[T]:
    """``send(n)`` for ``ROUND_SIZE`` values of ``n`` from ``first``, all released at once."""
    gate = threading.Barrier(ROUND_SIZE)

    def one(n: int) -> T:
        gate.wait()
        return send(n)

    with ThreadPoolExecutor(ROUND_SIZE) as pool:
        return list(pool.map(one, range(first, first + ROUND_SIZE)))


def _until_refused(send: Callable[[int], T], refused: Callable[[T], bool]) -> list[T]:
    """Rounds of ``send`` until one holds a refused answer; every answer of that round."""
    for number in range(MAX_ROUNDS):
        answers = _round(send, 1000 + number * ROUND_SIZE)
        if any(refused(answer) for answer in answers):
            return answers
    raise AssertionError(f"{MAX_ROUNDS} rounds of {ROUND_SIZE} appends at once were all accepted")


def _appends_until_refused(client: httpx.Client, tenant_id: str) -> list[httpx.Response]:
    """Appends of the key until its 1/s appends budget refuses one; that round's answers."""
    answers = _until_refused(
        lambda n: _append(client, tenant_id, n), lambda answer: answer.status_code == 429
    )
    for answer in answers:
        assert answer.status_code in (201, 429), answer.text
    return answers


def test_exactly_the_burst_passes_then_429_writes_nothing(limited: LiveApi) -> None:
    tenant_id, client = _new_tenant(limited)
    _slow(limited, tenant_id, "appends", APPENDS_BURST)
    for n in range(APPENDS_BURST):
        assert _append(client, tenant_id, n).status_code == 201
    refused = _append(client, tenant_id, APPENDS_BURST)
    assert refused.status_code == 429, refused.text
    assert 1 <= int(refused.headers["Retry-After"]) <= 1 / SLOW_RATE_PER_S
    body = refused.json()
    assert body["error"] == "rate_limited"
    assert "appends" in body["detail"] and "burst 2" in body["detail"]
    assert f"{SLOW_RATE_PER_S}/s" in body["detail"]
    assert _entry_count(limited, tenant_id) == APPENDS_BURST  # the refused append wrote nothing
    # Another class of the same key has its own budget.
    assert client.get("/v1/sessions/s").status_code == 200


def test_waiting_retry_after_is_enough(limited: LiveApi) -> None:
    tenant_id, client = _new_tenant(limited)
    answers = _appends_until_refused(client, tenant_id)
    refusals = [answer for answer in answers if answer.status_code == 429]
    for refused in refusals:
        assert refused.headers["Retry-After"] == "1"  # 1/s: the next request is a second away
        assert "appends" in refused.json()["detail"]
    written = _entry_count(limited, tenant_id)
    # Every accepted append wrote its entry and no refused one did.
    assert written == len(answers) - len(refusals)
    # The newest answer of the round, refused or not, left the bucket at most that far from
    # admitting the next request.
    time.sleep(int(refusals[0].headers["Retry-After"]))
    assert _append(client, tenant_id, 9999).status_code == 201
    assert _entry_count(limited, tenant_id) == written + 1


def test_flushes_have_their_own_limit(limited: LiveApi) -> None:
    tenant_id, client = _new_tenant(limited)
    _slow(limited, tenant_id, "flushes", 1)
    assert client.post("/v1/sessions/s/flush").status_code == 202
    refused = client.post("/v1/sessions/s/flush")
    assert refused.status_code == 429 and "flushes" in refused.json()["detail"]
    assert int(refused.headers["Retry-After"]) >= 1
    # The appends budget is untouched.
    assert _append(client, tenant_id, 0).status_code == 201


def test_another_tenants_key_and_unlimited_routes_are_unaffected(limited: LiveApi) -> None:
    tenant_id, client = _new_tenant(limited)
    _slow(limited, tenant_id, "appends", APPENDS_BURST)
    for n in range(APPENDS_BURST):
        _append(client, tenant_id, n)
    assert _append(client, tenant_id, 99).status_code == 429
    other_id, other = _new_tenant(limited)
    assert _append(other, other_id, 0).status_code == 201
    # Admin routes, health and metrics take no API key and are never limited.
    with limited.admin() as admin, limited.anonymous() as anonymous, limited.scraper() as scraper:
        for _ in range(READS_BURST + 2):
            assert admin.get(f"/v1/admin/tenants/{tenant_id}/keys").status_code == 200
            assert anonymous.get("/healthz").status_code == 200
            assert scraper.get("/metrics").status_code == 200


def test_two_api_replicas_share_one_budget(limited: LiveApi, replica: LiveApi) -> None:
    tenant_id, client = _new_tenant(limited)
    # A slow rate: no refill while the four requests run, however slow the machine.
    slow = {"appends": {"rate_per_s": 0.01, "burst": 2}}
    with limited.admin() as admin:
        assert admin.put(f"/v1/admin/tenants/{tenant_id}/limits", json=slow).status_code == 200
    with _key_client(replica, client) as there:
        assert _append(client, tenant_id, 0).status_code == 201
        assert _append(there, tenant_id, 1).status_code == 201
        assert _append(there, tenant_id, 2).status_code == 429
        assert _append(client, tenant_id, 3).status_code == 429


def test_admin_override_takes_effect_and_is_readable(limited: LiveApi, replica: LiveApi) -> None:
    tenant_id, client = _new_tenant(limited)
    path = f"/v1/admin/tenants/{tenant_id}/limits"
    with limited.admin() as admin:
        before = admin.get(path).json()
        assert before["overrides"] == {}
        assert before["effective"]["appends"] == {"rate_per_s": 1.0, "burst": APPENDS_BURST}
        slow = {"appends": {"rate_per_s": SLOW_RATE_PER_S, "burst": 4}}
        answer = admin.put(path, json=slow)
        assert answer.status_code == 200, answer.text
        assert answer.json()["overrides"] == slow
        assert admin.get(path).json()["effective"]["reads"]["burst"] == READS_BURST
        assert admin.put(path, json={"reads": {"rate_per_s": 1, "burst": 0}}).status_code == 422
        assert admin.put(path, json={"writes": {"rate_per_s": 1, "burst": 1}}).status_code == 422
        assert admin.put("/v1/admin/tenants/nobody/limits", json={}).status_code == 404
        assert httpx.get(f"{limited.url}{path}").status_code == 401
    # Both replicas apply it (the replica read it from the database, not from a message).
    with _key_client(replica, client) as there:
        for n in range(4):
            assert _append(client if n % 2 else there, tenant_id, n).status_code == 201
        refused = _append(client, tenant_id, 4)
    assert refused.status_code == 429
    assert f"{SLOW_RATE_PER_S}/s, burst 4" in refused.json()["detail"]
    # 100 s per request, partly waited.
    assert 1 <= int(refused.headers["Retry-After"]) <= 1 / SLOW_RATE_PER_S
    with limited.admin() as admin:
        assert admin.put(path, json={}).json()["overrides"] == {}


def test_client_with_retries_gets_through_and_without_raises_rate_limited(
    limited: LiveApi,
) -> None:
    tenant_id, client = _new_tenant(limited)
    key = client.headers["Authorization"].removeprefix("Bearer ")

    def send(n: int) -> RateLimited | None:
        """One append by a client without retries: ``None``, or what it raised."""
        try:
            with OMClient(limited.url, key, retry=RetryPolicy(attempts=1)) as once:
                once.append("s", conversation(1, prefix=f"{tenant_id}-x{n}-"))
        except RateLimited as exc:
            return exc
        return None

    raised = [exc for exc in _until_refused(send, lambda exc: exc is not None) if exc]
    for exc in raised:
        assert exc.status == 429 and exc.code == "rate_limited"
        assert exc.retry_after_s == 1
    with OMClient(limited.url, key) as patient:  # the default policy honours Retry-After
        answer = patient.append("s", conversation(1, prefix=f"{tenant_id}-y-"))
    assert len(answer.appended_ids) == 1


def test_redis_down_fails_open_with_a_metric(tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(database_url)
    nowhere = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    store = SqlStore.from_url(database_url)
    down: redis.Redis = connect(nowhere, connect_timeout_s=0.2, retries=0)
    try:
        settings = _settings(database_url, nowhere)
        with serve(settings, store, down, Published()) as live:
            tenant_id, client = _new_tenant(live)
            for n in range(APPENDS_BURST + 2):
                assert _append(client, tenant_id, n).status_code == 201
            for _ in range(READS_BURST + 2):
                assert client.get("/v1/sessions/s").status_code == 200
            with live.scraper() as scraper:
                metrics = scraper.get("/metrics").text
    finally:
        down.close()
        store.close()
    line = next(
        x for x in metrics.splitlines() if x.startswith("om_api_rate_limit_unavailable_total")
    )
    assert float(line.split()[-1]) >= APPENDS_BURST + READS_BURST + 4
    assert ADMIN_TOKEN not in metrics
