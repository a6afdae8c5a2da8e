"""A flush job that waits in the fair queue joins the trace of the request that queued it when
another job's end admits it, not the trace of that other job (real Redis, tracing on in this
process, exporting to a local OTLP receiver)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from om_workers.coordination import keys
from om_workers.coordination.fairness import FairPublisher, FairQueue
from om_workers.telemetry import tracing
from tests.e2e.otlp_receiver import OtlpReceiver, receiving


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    with receiving() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        assert tracing.configure_tracing("om-test")
        try:
            yield receiver
        finally:
            tracing.shutdown_tracing()
    assert not tracing.enabled()


def _trace_id() -> str:
    ids = tracing.current_ids()
    assert ids is not None
    return ids[0]


def test_a_waiting_job_joins_the_trace_of_the_request_that_queued_it(
    traced: OtlpReceiver, client: redis.Redis
) -> None:
    sent: dict[str, str] = {}

    def send(tenant_id: str, session_id: str, job_id: str) -> None:
        sent[job_id] = tracing.inject_headers()["traceparent"].split("-")[1]

    publisher = FairPublisher(FairQueue(client, capacity=1), send)
    with tracing.span("request 1"):
        first = _trace_id()
        publisher("t1", "s1", "j1")  # admitted at once: published in its request's trace
    with tracing.span("request 2"):
        second = _trace_id()
        publisher("t2", "s2", "j2")  # waits: the capacity is taken
    assert sent == {"j1": first}
    assert client.exists(keys.trace_context_key("j2")) == 1
    with tracing.span("job 1 ends"):
        ending = _trace_id()
        publisher.finished("j1")
    assert sent["j2"] == second and ending not in (first, second)
    assert client.exists(keys.trace_context_key("j2")) == 0  # read once, then gone


def test_a_job_queued_outside_a_request_keeps_the_trace_its_queueing_began(
    traced: OtlpReceiver, client: redis.Redis
) -> None:
    sent: dict[str, str] = {}

    def send(tenant_id: str, session_id: str, job_id: str) -> None:
        headers = tracing.inject_headers()
        sent[job_id] = headers["traceparent"].split("-")[1] if headers else ""

    publisher = FairPublisher(FairQueue(client, capacity=1), send)
    publisher("t1", "s1", "j1")
    publisher("t2", "s2", "j2")  # the reconciler's way: no request, its own queueing span
    assert client.exists(keys.trace_context_key("j2")) == 1
    with tracing.span("job 1 ends"):
        ending = _trace_id()
        publisher.finished("j1")
    assert sent["j1"] == ""  # published outside any span
    assert sent["j2"] not in ("", ending)
