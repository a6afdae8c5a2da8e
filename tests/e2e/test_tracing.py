"""One trace from an HTTP flush request to the model call: a real ``om api`` process and a real
``celery worker`` process export spans over OTLP/HTTP to a receiver the test runs; the worker's
provider is a local OpenAI-compatible server that reports token usage."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import httpx
import pytest

from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import AccountStore, upgrade
from tests.api.processes import start_api
from tests.conftest import BACKENDS, fresh_database
from tests.e2e import llm_server
from tests.e2e.otlp_receiver import OtlpReceiver, ReceivedSpan, receiving
from tests.e2e.workers import StartWorker

MODEL: Final = "gpt-trace-test"
PROVIDER_KEY: Final = "sk-trace-test-0123456789abcdef"
WAIT_S: Final = 120.0
"""The bound of each wait for something that happens (a job finishing, spans arriving)."""
SPAN_KINDS: Final = {"server": 2, "client": 3, "producer": 4, "consumer": 5}
"""``opentelemetry.proto`` span kinds."""


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path) as url:
        upgrade(url)
        yield url


def _tracing_env(receiver: OtlpReceiver) -> dict[str, str]:
    # A short batch delay: spans leave within a tenth of a second, not five.
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}


def _wait_for_job(api: httpx.Client, job_id: str) -> dict[str, object]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        job: dict[str, object] = api.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "skipped"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish")


def _wait_for_trace(receiver: OtlpReceiver, trace_id: str) -> list[ReceivedSpan]:
    """The trace once its worker span, a model call and the API's server span arrived."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        spans = receiver.trace(trace_id)
        names = {s.name for s in spans}
        if {"om.flush process", f"chat {MODEL}", "POST /v1/sessions/{session_id}/flush"} <= names:
            return spans
        time.sleep(0.2)
    raise AssertionError(f"trace incomplete: {sorted({s.name for s in receiver.trace(trace_id)})}")


def _ancestors(span: ReceivedSpan, by_id: dict[str, ReceivedSpan]) -> list[str]:
    """Names of the span's ancestors up to the API's server span, whose parent is the test's
    own (never exported) span."""
    names = []
    while span.parent_id in by_id:
        span = by_id[span.parent_id]
        names.append(span.name)
    return names


def test_one_trace_spans_api_queue_worker_lock_store_and_model_calls(
    database_url: str,
    accounts: AccountStore,
    start_worker: StartWorker,
    redis_server: EmbeddedRedis,
    tmp_path: Path,
) -> None:
    tenant = accounts.create_tenant("traced").id
    key = accounts.create_api_key(tenant).plaintext
    canary = f"canary-{secrets.token_hex(6)}"
    trace_id = secrets.token_hex(16)
    with receiving() as receiver, llm_server.running() as llm:
        # A fixed fair-queue capacity: the job is admitted by the request itself, whether or
        # not the worker has advertised its slots yet.
        process, url = start_api(
            database_url,
            redis_server.url,
            tmp_path / "api.log",
            OM_FAIR_QUEUE_CAPACITY="4",
            **_tracing_env(receiver),
        )
        try:
            worker = start_worker(
                OM_PROVIDER="openai",
                OM_PROVIDER_BASE_URL=llm.url,
                OM_PROVIDER_API_KEY=PROVIDER_KEY,
                OM_MODEL=MODEL,
                **_tracing_env(receiver),
            )
            headers = {"Authorization": f"Bearer {key}"}
            with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
                assert api.post("/v1/sessions", json={"id": "s1"}).status_code == 201
                chat = [
                    {"kind": "message", "message": {"role": role, "content": f"{canary} {text}"}}
                    for role, text in (("user", "port 6432"), ("assistant", "noted"))
                ]
                assert (
                    api.post("/v1/sessions/s1/entries", json={"entries": chat}).status_code == 201
                )
                # The caller's own trace context: the API's server span continues it.
                parent = {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
                answer = api.post("/v1/sessions/s1/flush", json={"force": True}, headers=parent)
                assert answer.status_code == 202, answer.text
                job_id = answer.json()["job_id"]
                assert _wait_for_job(api, job_id)["state"] == "succeeded"
            spans = _wait_for_trace(receiver, trace_id)
            worker.stop()
        finally:
            process.terminate()
            process.wait(timeout=30)
    by_id = {s.span_id: s for s in spans}
    by_name: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    (server,) = by_name["POST /v1/sessions/{session_id}/flush"]
    assert server.parent_id not in by_id  # the caller's span: the trace continues it
    (publish,) = by_name["om.flush publish"]
    (process_span,) = by_name["om.flush process"]
    assert server.service == "om-api" and server.kind == SPAN_KINDS["server"]
    assert server.attributes["http.route"] == "/v1/sessions/{session_id}/flush"
    assert server.attributes["http.response.status_code"] == 202
    # API -> fair queue -> publish -> (Celery message) -> worker.
    assert publish.service == "om-api" and publish.kind == SPAN_KINDS["producer"]
    assert "POST /v1/sessions/{session_id}/flush" in _ancestors(publish, by_id)
    (queued,) = by_name["fair_queue add"]
    assert "POST /v1/sessions/{session_id}/flush" in _ancestors(queued, by_id)
    assert queued.attributes["om.fair_queue.admitted"] == 1
    assert process_span.service == "om-worker" and process_span.kind == SPAN_KINDS["consumer"]
    assert process_span.parent_id == publish.span_id
    assert process_span.attributes["om.job_id"] == job_id
    assert process_span.attributes["om.outcome"] == "succeeded"
    # Inside the worker: the lock, store transactions and every model call.
    (lock,) = by_name["session lock acquire"]
    assert lock.parent_id == process_span.span_id and lock.attributes["om.lock.acquired"] is True
    worker_writes = [
        s for s in by_name["db transaction write"] if "om.flush process" in _ancestors(s, by_id)
    ]
    assert worker_writes and all(s.service == "om-worker" for s in worker_writes)
    assert any(s.service == "om-api" for s in by_name["db transaction write"])
    backend = "postgresql" if database_url.startswith("postgresql") else "sqlite"
    assert {s.attributes["db.system.name"] for s in worker_writes} == {backend}
    calls = by_name[f"chat {MODEL}"]
    assert len(calls) == sum(llm.calls.values())
    for call in calls:
        assert call.kind == SPAN_KINDS["client"] and "om.flush process" in _ancestors(call, by_id)
        assert call.attributes["gen_ai.operation.name"] == "chat"
        assert call.attributes["gen_ai.request.model"] == MODEL
        assert call.attributes["gen_ai.response.model"] == MODEL
        assert call.attributes["gen_ai.usage.input_tokens"] > 0
        assert call.attributes["gen_ai.usage.output_tokens"] > 0
    # Never message text or secrets in any span of any service.
    everything = json.dumps(
        [s.attributes for s in receiver.spans] + [s.name for s in receiver.spans]
    )
    assert canary not in everything and PROVIDER_KEY not in everything and key not in everything
    assert receiver.content_types == {"application/x-protobuf"}
    # Trace and span ids in the JSON log lines of the request and of the task.
    _assert_logged_in_trace(tmp_path / "api.log", trace_id, "request_id")
    _assert_logged_in_trace(worker.log, trace_id, "job_id")


def _assert_logged_in_trace(log: Path, trace_id: str, field: str) -> None:
    lines = []
    for raw in log.read_text(errors="replace").splitlines():
        if raw.startswith("{"):
            lines.append(json.loads(raw))
    traced = [line for line in lines if line.get("trace_id") == trace_id]
    assert traced, f"no log line of trace {trace_id} in {log.name}"
    assert all(len(line["span_id"]) == 16 and field in line for line in traced)
