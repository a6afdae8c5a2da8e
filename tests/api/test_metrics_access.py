"""``/metrics`` on the public port: only the scraper holding the metrics token reads it."""

from __future__ import annotations

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from om_api.server.metrics import ApiMetrics
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from tests.api.conftest import make_settings
from tests.api.server import METRICS_TOKEN, LiveApi, Published, serve


def test_metrics_refused_without_the_token(api: LiveApi) -> None:
    _, tenant = api.tenant()
    with api.anonymous() as anonymous:
        bare = anonymous.get("/metrics")
        wrong = anonymous.get("/metrics", headers={"Authorization": "Bearer not-the-token"})
        basic = anonymous.get("/metrics", headers={"Authorization": f"Basic {METRICS_TOKEN}"})
    with tenant:
        with_key = tenant.get("/metrics")
    for answer in (bare, wrong, basic, with_key):
        assert answer.status_code == 401, answer.text
        assert answer.json()["error"] == "unauthorized"
        assert answer.headers["www-authenticate"] == "Bearer"
        assert "om_api_" not in answer.text and METRICS_TOKEN not in answer.text
    with api.scraper() as scraper:
        scraped = scraper.get("/metrics")
    assert scraped.status_code == 200 and "om_api_requests_total" in scraped.text
    assert METRICS_TOKEN not in scraped.text


def test_metrics_absent_without_a_configured_token(
    api_redis_server: EmbeddedRedis, api: LiveApi
) -> None:
    settings = make_settings(
        api.store.engine.url.render_as_string(hide_password=False), api_redis_server.url
    ).model_copy(update={"metrics_token": None})
    client: redis.Redis = connect(api_redis_server.url)
    try:
        with serve(settings, api.store, client, Published()) as live, live.anonymous() as anonymous:
            for headers in ({}, {"Authorization": f"Bearer {METRICS_TOKEN}"}):
                answer = anonymous.get("/metrics", headers=headers)
                assert answer.status_code == 404, answer.text
                assert answer.json()["error"] == "not_found"
            assert anonymous.get("/healthz").status_code == 200
    finally:
        client.close()


def test_each_request_counts_in_its_own_series() -> None:
    metrics = ApiMetrics()
    for method, route, status, seconds in (
        ("GET", "/v1/a", 200, 0.01),
        ("GET", "/v1/a", 200, 0.02),
        ("GET", "/v1/a", 404, 0.03),
        ("POST", "/v1/a", 200, 0.04),
        ("GET", "/v1/b", 200, 0.05),
    ):
        metrics.observe_request(method, route, status, seconds)
    families = {
        family.name: family for family in text_string_to_metric_families(metrics.render().decode())
    }
    requests = {
        (s.labels["method"], s.labels["route"], s.labels["status"]): s.value
        for s in families["om_api_requests"].samples
        if s.name == "om_api_requests_total"
    }
    assert requests == {
        ("GET", "/v1/a", "200"): 2.0,
        ("GET", "/v1/a", "404"): 1.0,
        ("POST", "/v1/a", "200"): 1.0,
        ("GET", "/v1/b", "200"): 1.0,
    }
    latency = {
        (s.labels["method"], s.labels["route"]): s.value
        for s in families["om_api_request_duration_seconds"].samples
        if s.name == "om_api_request_duration_seconds_sum"
    }
    assert latency == pytest.approx(
        {("GET", "/v1/a"): 0.06, ("POST", "/v1/a"): 0.04, ("GET", "/v1/b"): 0.05}
    )
