"""Health, readiness, metrics, request ids, JSON logs without secrets, and Redis outages."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
from pydantic import SecretStr

from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.logs import HANDLER_NAME
from om_workers.store import SqlStore
from tests.api.conftest import make_settings
from tests.api.seed import seeded_session
from tests.api.server import ADMIN_TOKEN, LiveApi, Published, serve


def test_health_ready_metrics(api: LiveApi) -> None:
    with api.anonymous() as anonymous:
        assert anonymous.get("/healthz").json() == {"status": "ok", "checks": {}}
        ready = anonymous.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["checks"] == {"redis": True, "database": True}
        _, client = api.tenant()
        client.get("/v1/sessions/abc")
        assert anonymous.get("/metrics").status_code == 401
        with api.scraper() as scraper:
            metrics = scraper.get("/metrics")
        assert metrics.status_code == 200
        assert metrics.headers["content-type"].startswith("text/plain")
        text = metrics.text
        assert 'route="/v1/sessions/{session_id}"' in text and 'status="404"' in text
        assert "om_api_request_duration_seconds_bucket" in text
        assert 'om_api_flush_enqueue_total{outcome="published"}' in text
        openapi = anonymous.get("/openapi.json").json()
        assert "/v1/sessions/{session_id}/memory/{memory_id}" in openapi["paths"]
        assert anonymous.get("/docs").status_code == 200


def test_request_id_is_echoed_or_minted(api: LiveApi) -> None:
    with api.anonymous() as anonymous:
        echoed = anonymous.get("/healthz", headers={"X-Request-ID": "req-123"})
        assert echoed.headers["x-request-id"] == "req-123"
        minted = anonymous.get("/healthz", headers={"X-Request-ID": "bad id<script>"})
        assert len(minted.headers["x-request-id"]) == 32
        error = anonymous.get("/v1/sessions/x", headers={"X-Request-ID": "req-456"})
        assert error.json()["request_id"] == "req-456"


def test_logs_are_json_and_never_hold_secrets(api: LiveApi) -> None:
    logger = logging.getLogger("om_api")
    formatter = next(h for h in logger.handlers if h.get_name() == HANDLER_NAME).formatter
    buffer = io.StringIO()
    capture = logging.StreamHandler(buffer)
    capture.setFormatter(formatter)
    logger.addHandler(capture)
    try:
        tid, client = api.tenant()
        key = str(client.headers["authorization"]).removeprefix("Bearer ")
        seeded_session(client, "s", tid)
        # A key echoed inside input that a log line could quote is still redacted.
        client.get(f"/v1/sessions/{key[:100]}")
        client.post("/v1/sessions", json={"id": key[:128]})
        logger.info("echo %s", key, extra={"token": ADMIN_TOKEN})
    finally:
        logger.removeHandler(capture)
    captured = buffer.getvalue()
    records = [json.loads(line) for line in captured.splitlines()]
    assert any(r.get("route") == "/v1/sessions/{session_id}" for r in records)
    assert all("request_id" in r for r in records if r["message"] == "request")
    assert records[-1]["message"] == "echo [REDACTED]" and records[-1]["token"] == "[REDACTED]"
    assert key not in captured and ADMIN_TOKEN not in captured


@pytest.fixture
def private_redis() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


def test_redis_down_flush_is_503_with_retry_after(
    private_redis: EmbeddedRedis, db_path: str
) -> None:
    store = SqlStore.from_url(db_path)
    client = connect(private_redis.url, retries=0)
    with serve(make_settings(db_path, private_redis.url), store, client, Published()) as live:
        tid, tenant = live.tenant()
        seeded_session(tenant, "s", tid)
        private_redis.stop()
        answer = tenant.post("/v1/sessions/s/flush")
        assert answer.status_code == 503, answer.text
        assert answer.headers["retry-after"].isdigit()
        assert answer.json()["error"] == "unavailable"
        assert live.published.calls == []
        # Reads do not need Redis; readiness reports it.
        assert tenant.get("/v1/sessions/s/context").status_code == 200
        assert tenant.get("/v1/sessions/s/status").json()["in_flight"] is False
        ready = httpx.get(f"{live.url}/readyz")
        assert ready.status_code == 503 and ready.json()["checks"]["redis"] is False
        with live.scraper() as scraper:
            metrics = scraper.get("/metrics").text
        assert 'om_api_flush_enqueue_total{outcome="unavailable"} 1.0' in metrics
        # Back up: the flush is accepted.
        private_redis.start()
        assert tenant.post("/v1/sessions/s/flush").status_code == 202
    client.close()
    store.close()


def test_publish_failure_is_503_and_withdraws_the_request(db_path: str, api: LiveApi) -> None:
    def broken(tenant_id: str, session_id: str, job_id: str) -> None:
        raise ConnectionError("broker refused")

    store = SqlStore.from_url(db_path)
    settings = make_settings(db_path, "redis://127.0.0.1:1/0")
    with serve(settings, store, api.redis, Published(), publish=broken) as live:
        tid, tenant = live.tenant()
        seeded_session(tenant, "s", tid)
        for _ in range(2):  # the marker was withdrawn: the retry does not coalesce onto it
            answer = tenant.post("/v1/sessions/s/flush")
            assert answer.status_code == 503 and "broker refused" in answer.json()["detail"]
            assert answer.headers["retry-after"].isdigit()
    store.close()


def test_provider_key_and_admin_token_are_redacted(db_path: str, api: LiveApi) -> None:
    provider_key = "sk-provider-secret-0123456789"
    settings = make_settings(db_path, "redis://127.0.0.1:1/0").model_copy(
        update={"provider_api_key": SecretStr(provider_key)}
    )
    store = SqlStore.from_url(db_path)
    with serve(settings, store, api.redis, Published()) as live:
        tid, tenant = live.tenant()
        tenant.post("/v1/sessions", json={"id": "s"})
        text = f"provider {provider_key} admin {ADMIN_TOKEN}"
        entries = [
            {"id": f"{tid}-1", "kind": "message", "message": {"role": "user", "content": text}}
        ]
        tenant.post("/v1/sessions/s/entries", json={"entries": entries})
        recent = tenant.get("/v1/sessions/s/context").json()["blocks"][1]["text"]
        assert provider_key not in recent and ADMIN_TOKEN not in recent
        assert recent.count("[REDACTED]") == 2
    store.close()
