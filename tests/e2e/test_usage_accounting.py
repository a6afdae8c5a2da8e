"""Token accounting end to end: a real ``celery worker`` calling a local OpenAI-compatible server
that reports usage, flushes requested over HTTP from the real API, and every total (the job's,
the admin report's per tenant, the worker's ``om_model_tokens_total``) equal to the sum of what
the upstream reported."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from om_workers.celery.tasks import publisher
from om_workers.config import Settings
from om_workers.coordination.embedded import EmbeddedRedis, free_port
from om_workers.store import SqlStore
from tests.api.server import ADMIN_TOKEN, LiveApi, Published, serve
from tests.e2e import llm_server
from tests.e2e.support import wait_for
from tests.e2e.test_distributed import REFLECTING, metrics_of
from tests.e2e.workers import FINAL, StartWorker

SECRET = "sk-usage-0123456789abcdef"
PRICES = {"gpt-usage": {"input": 0.15, "output": 0.6}}
SESSIONS = {"a": ("ua1", "ua2"), "b": ("ub1",)}


@pytest.fixture
def live(
    redis_server: EmbeddedRedis, database_url: str, store: SqlStore, client: redis.Redis, app: Any
) -> Iterator[LiveApi]:
    settings = Settings(
        database_url=database_url,
        redis_url=redis_server.url,
        admin_token=ADMIN_TOKEN,
        prices=PRICES,
    )
    with serve(settings, store, client, Published(), publish=publisher(app)) as api:
        yield api


def _chat(http: httpx.Client, session: str, turns: int) -> None:
    assert http.post("/v1/sessions", json={"id": session}).status_code == 201
    entries = [
        {"kind": "message", "message": {"role": role, "content": f"{role} turn {i} of {session}"}}
        for i in range(turns)
        for role in ("user", "assistant")
    ]
    answer = http.post(f"/v1/sessions/{session}/entries", json={"entries": entries})
    assert answer.status_code == 201, answer.text


def _flushed(http: httpx.Client, session: str) -> dict[str, Any]:
    job_id = http.post(f"/v1/sessions/{session}/flush", json={"force": True}).json()["job_id"]

    def final() -> bool:
        return http.get(f"/v1/jobs/{job_id}").json()["state"] in FINAL

    wait_for(final, 60, f"the flush of {session}")
    job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}").json()
    assert job["state"] == "succeeded", job
    return job


def test_token_totals_equal_the_upstreams_reported_usage(
    live: LiveApi, start_worker: StartWorker
) -> None:
    port = free_port()
    with llm_server.running() as server:
        start_worker(
            OM_PROVIDER="openai",
            OM_PROVIDER_BASE_URL=server.url,
            OM_PROVIDER_API_KEY=SECRET,
            OM_MODEL="gpt-usage",
            OM_REFLECTOR_MODEL="gpt-reflect",
            OM_SETTINGS_JSON=json.dumps(REFLECTING),
            OM_WORKER_METRICS_PORT=str(port),
        )
        tenants = {name: live.tenant() for name in SESSIONS}
        jobs: dict[str, dict[str, Any]] = {}
        for name, sessions in SESSIONS.items():
            http = tenants[name][1]
            for session in sessions:
                _chat(http, session, 12)
                jobs[session] = _flushed(http, session)

        for session, job in jobs.items():
            usage = job["usage"]
            assert (usage["input_tokens"], usage["output_tokens"]) == server.usage_for(session)
            assert usage["calls"] == server.calls_for(session) > 0
            models = {m["model"]: m for m in usage["models"]}
            assert set(models) <= {"gpt-usage", "gpt-reflect"}
            priced = models["gpt-usage"]
            expected = (priced["input_tokens"] * 0.15 + priced["output_tokens"] * 0.6) / 1e6
            assert priced["cost"] == pytest.approx(expected)
            assert usage["cost"] == pytest.approx(expected)
            assert usage["unpriced_models"] == (["gpt-reflect"] if "gpt-reflect" in models else [])
        assert any(
            "gpt-reflect" in {m["model"] for m in j["usage"]["models"]} for j in jobs.values()
        )

        samples = metrics_of(port)
        with live.admin() as admin:
            for name, sessions in SESSIONS.items():
                tenant_id = tenants[name][0]
                truth = [server.usage_for(s) for s in sessions]
                want_in, want_out = sum(t[0] for t in truth), sum(t[1] for t in truth)
                report = admin.get("/v1/admin/usage", params={"tenant": tenant_id}).json()
                assert {r["tenant_id"] for r in report["rows"]} == {tenant_id}
                assert (report["input_tokens"], report["output_tokens"]) == (want_in, want_out)
                metric = 'om_model_tokens_total{{direction="{d}",model="{m}",tenant="{t}"}}'
                counted = [
                    sum(
                        samples.get(metric.format(d=d, m=m, t=tenant_id), 0.0)
                        for m in ("gpt-usage", "gpt-reflect")
                    )
                    for d in ("input", "output")
                ]
                assert counted == [want_in, want_out], samples
            everyone = admin.get("/v1/admin/usage").json()
            assert everyone["input_tokens"] == sum(v[0] for v in server.usage.values())
        assert SECRET not in json.dumps(jobs)
