"""A flush request with nothing to do is answered by the session's newest job from one read:
no job row, no marker, no publish. Unobserved work past the observer's threshold, an option, or
a failed newest job still gets a job of its own, so no flush is lost. On both stores."""

from __future__ import annotations

import httpx
import pytest

from om_core.settings import DEFAULT_OBSERVATION_MESSAGE_TOKENS
from om_workers.coordination import keys
from tests.api.seed import conversation, message
from tests.api.server import LiveApi

# About four characters a token: this many characters pass the default threshold.
OVER_THRESHOLD_CHARS = DEFAULT_OBSERVATION_MESSAGE_TOKENS * 5


def _session(api: LiveApi) -> tuple[str, httpx.Client]:
    tenant_id, client = api.tenant()
    assert client.post("/v1/sessions", json={"id": "s"}).status_code == 201
    entries = conversation(4, f"{tenant_id}-")
    assert client.post("/v1/sessions/s/entries", json={"entries": entries}).status_code == 201
    return tenant_id, client


def _flush(client: httpx.Client, body: dict[str, bool] | None = None) -> dict[str, object]:
    answer = client.post("/v1/sessions/s/flush", json=body)
    assert answer.status_code == 202, answer.text
    ticket: dict[str, object] = answer.json()
    return ticket


def _jobs_published(api: LiveApi, tenant_id: str) -> list[str]:
    return [job for tenant, _, job in api.published.calls if tenant == tenant_id]


def _idle_count(api: LiveApi) -> float:
    with api.scraper() as client:
        text = client.get("/metrics").text
    for line in text.splitlines():
        if line.startswith('om_api_flush_enqueue_total{outcome="idle"}'):
            return float(line.split()[-1])
    raise AssertionError("no idle outcome in the metrics")


def test_first_request_publishes_and_later_idle_ones_name_the_same_job(
    backend_api: LiveApi,
) -> None:
    tenant_id, client = _session(backend_api)
    first = _flush(client)
    assert first == {"job_id": first["job_id"], "coalesced": False, "state": "queued"}
    idle_before = _idle_count(backend_api)
    again = _flush(client)
    assert again == {"job_id": first["job_id"], "coalesced": True, "state": "queued"}
    assert _jobs_published(backend_api, tenant_id) == [first["job_id"]]
    assert _idle_count(backend_api) == idle_before + 1


def test_running_and_succeeded_jobs_answer_without_a_row_or_a_publish(
    backend_api: LiveApi,
) -> None:
    tenant_id, client = _session(backend_api)
    job_id = str(_flush(client)["job_id"])
    store = backend_api.store
    store.start_job(tenant_id, job_id)
    assert _flush(client) == {"job_id": job_id, "coalesced": True, "state": "running"}
    store.finish_job(tenant_id, job_id, "succeeded")
    # A turn's messages below the threshold: still nothing to do.
    more = [message(f"{tenant_id}-late", "user", "one more turn")]
    assert client.post("/v1/sessions/s/entries", json={"entries": more}).status_code == 201
    assert _flush(client) == {"job_id": job_id, "coalesced": True, "state": "succeeded"}
    assert _jobs_published(backend_api, tenant_id) == [job_id]
    assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "succeeded"
    # The idle path set no marker: a pending marker would swallow the next real request.
    assert backend_api.redis.get(keys.pending_key(tenant_id, "s")) in (None, job_id)


def test_work_past_the_threshold_while_a_job_runs_gets_a_later_job(
    backend_api: LiveApi,
) -> None:
    tenant_id, client = _session(backend_api)
    job_id = str(_flush(client)["job_id"])
    backend_api.store.start_job(tenant_id, job_id)
    big = [message(f"{tenant_id}-big", "tool", "x" * OVER_THRESHOLD_CHARS, tool_call_id="c1")]
    assert client.post("/v1/sessions/s/entries", json={"entries": big}).status_code == 201
    later = _flush(client)
    assert later["job_id"] != job_id and later["coalesced"] is False
    assert later["state"] == "queued"
    assert _jobs_published(backend_api, tenant_id) == [job_id, later["job_id"]]


@pytest.mark.parametrize("body", [{"force": True}, {"full_reflection_rebuild": True}])
def test_an_option_always_reaches_a_queued_job(backend_api: LiveApi, body: dict[str, bool]) -> None:
    tenant_id, client = _session(backend_api)
    job_id = str(_flush(client)["job_id"])
    backend_api.store.start_job(tenant_id, job_id)
    backend_api.store.finish_job(tenant_id, job_id, "succeeded")
    with_option = _flush(client, body)
    assert with_option["job_id"] != job_id and with_option["state"] == "queued"
    job = client.get(f"/v1/jobs/{with_option['job_id']}").json()
    assert all(job[name] is True for name in body)


def test_a_failed_newest_job_is_run_again_by_a_new_one(backend_api: LiveApi) -> None:
    tenant_id, client = _session(backend_api)
    job_id = str(_flush(client)["job_id"])
    backend_api.store.start_job(tenant_id, job_id)
    backend_api.store.finish_job(tenant_id, job_id, "failed", error="provider down")
    retry = _flush(client)
    assert retry["job_id"] != job_id and retry["coalesced"] is False
    # The new job is queued: the next idle request names it, not the failed one.
    assert _flush(client) == {"job_id": retry["job_id"], "coalesced": True, "state": "queued"}


def test_another_tenants_or_a_missing_session_is_404(backend_api: LiveApi) -> None:
    _, client = _session(backend_api)
    _flush(client)
    _, other = backend_api.tenant()
    assert other.post("/v1/sessions/s/flush").status_code == 404
    assert client.post("/v1/sessions/missing/flush").status_code == 404
