"""Flush and jobs (202 after the job row, coalescing, 503 with Redis down), work scopes."""

from __future__ import annotations

from tests.api.seed import OBS_ID, seeded_session
from tests.api.server import LiveApi


def test_flush_records_the_run_then_publishes(api: LiveApi) -> None:
    tid, client = api.tenant()
    seeded_session(client, "s", tid)
    answer = client.post("/v1/sessions/s/flush", json={"force": True})
    assert answer.status_code == 202, answer.text
    accepted = answer.json()
    assert accepted["coalesced"] is False
    assert (tid, "s", accepted["job_id"]) in api.published.calls
    job = client.get(f"/v1/jobs/{accepted['job_id']}").json()
    assert job["state"] == "queued" and job["force"] is True and job["session_id"] == "s"
    assert job["duration_s"] is None and job["error"] is None
    # A second request while the job is pending coalesces onto it and publishes nothing.
    published = len(api.published.calls)
    second = client.post("/v1/sessions/s/flush")
    assert second.status_code == 202
    assert second.json() == {"job_id": accepted["job_id"], "coalesced": True, "state": "queued"}
    assert len(api.published.calls) == published
    status = client.get("/v1/sessions/s/status").json()
    assert status["in_flight"] is True


def test_flush_options_reach_the_run_row_and_widen_a_pending_job(api: LiveApi) -> None:
    _, client = api.tenant()
    client.post("/v1/sessions", json={"id": "s"})
    first = client.post("/v1/sessions/s/flush").json()
    job = client.get(f"/v1/jobs/{first['job_id']}").json()
    assert job["force"] is False and job["full_reflection_rebuild"] is False
    widened = client.post(
        "/v1/sessions/s/flush", json={"force": True, "full_reflection_rebuild": True}
    ).json()
    assert widened == {"job_id": first["job_id"], "coalesced": True, "state": "queued"}
    job = client.get(f"/v1/jobs/{first['job_id']}").json()
    assert job["force"] is True and job["full_reflection_rebuild"] is True


def test_flush_and_job_errors(api: LiveApi) -> None:
    _, client = api.tenant()
    assert client.post("/v1/sessions/none/flush").status_code == 404
    assert client.get("/v1/jobs/not-a-job").status_code == 404
    assert client.get("/v1/jobs/bad%20id").status_code == 422
    client.post("/v1/sessions", json={"id": "s"})
    assert client.post("/v1/sessions/s/flush", json={"force": "maybe"}).status_code == 422


def test_scope_lifecycle(api: LiveApi) -> None:
    tid, client = api.tenant()
    seeded_session(client, "s", tid)
    base = "/v1/sessions/s/scopes"
    opened = client.post(base, json={"id": "plan:a", "kind": "plan", "label": "Plan A"})
    assert opened.status_code == 201, opened.text
    record = opened.json()
    assert record["appended"] and record["entry"]["data"]["type"] == "om.scope.opened"
    assert client.post(base, json={"id": "plan:a"}).status_code == 409
    assert client.post(base, json={"id": "task:x", "parent_id": "nope"}).status_code == 404
    assert client.post(base, json={"id": "session"}).status_code == 422
    assert client.post(base, json={"id": "a..b"}).status_code == 422
    assert client.post(base, json={"id": "bad id"}).status_code == 422
    entered = client.post(f"{base}/plan:a/enter").json()
    assert entered["entry"]["data"]["type"] == "om.scope.entered"
    bound = client.post(f"{base}/plan:a/bind", json={"refs": [f"om:{OBS_ID}"]}).json()
    assert bound["appended"] is True
    again = client.post(f"{base}/plan:a/bind", json={"refs": [f"om:{OBS_ID}"]}).json()
    assert again == {"appended": False, "entry": None}
    unknown_ref = client.post(f"{base}/plan:a/bind", json={"refs": ["om:ffffffffffff"]})
    assert unknown_ref.status_code == 422
    assert client.post(f"{base}/plan:a/bind", json={"refs": ["xyz"]}).status_code == 422
    context = client.get("/v1/sessions/s/context", params={"scope": "plan:a"}).json()
    assert "Plan A" in context["blocks"][0]["text"]
    assert client.post(f"{base}/plan:a/close").status_code == 409  # still entered
    assert client.post(f"{base}/other/leave").status_code == 409  # not the leaf
    assert client.post(f"{base}/plan:a/leave").json()["entry"]["data"]["type"] == "om.scope.left"
    unbound = client.post(f"{base}/plan:a/unbind", json={"refs": [f"om:{OBS_ID}"]}).json()
    assert unbound["appended"] is True
    granted = client.post(f"{base}/plan:a/grant", json={"principal_ids": ["s2"]}).json()
    assert granted["entry"]["data"]["type"] == "om.scope.granted"
    revoked = client.post(f"{base}/plan:a/revoke", json={"principal_ids": ["s2"]}).json()
    assert revoked["entry"]["data"]["type"] == "om.scope.revoked"
    assert client.post(f"{base}/plan:a/grant", json={"principal_ids": []}).status_code == 422
    closed = client.post(f"{base}/plan:a/close").json()
    assert closed["entry"]["data"]["type"] == "om.scope.closed"
    assert client.post(f"{base}/plan:a/close").status_code == 409
    assert client.post(f"{base}/missing/enter").status_code == 404
