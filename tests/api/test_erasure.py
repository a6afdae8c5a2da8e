"""Erasure over HTTP: DELETE a session or a subject answers 202 with an erasure job, the
sessions are 404 on every route at once, another tenant's key cannot erase (404), asking again
answers the same job, and the job (run here in process) reads like a flush job."""

from __future__ import annotations

import asyncio

import pytest

from om_api.client import AsyncOMClient, OMClient
from om_api.client.core import InvalidRequest, NotFound
from om_workers.jobs.erase import run_erasure_job
from tests.api.server import LiveApi


def _user(text: str) -> dict[str, object]:
    return {"kind": "message", "message": {"role": "user", "content": text}}


def test_a_session_erased_over_http_is_gone_at_once_and_its_job_reads_like_a_flush_job(
    backend_api: LiveApi,
) -> None:
    api = backend_api
    _, a = api.tenant()
    _, b = api.tenant()
    assert a.post("/v1/sessions", json={"id": "doomed"}).status_code == 201
    assert (
        a.post("/v1/sessions/doomed/entries", json={"entries": [_user("hello")]}).status_code == 201
    )
    assert b.delete("/v1/sessions/doomed").status_code == 404  # another tenant's key

    answer = a.delete("/v1/sessions/doomed")
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["job_id"]
    assert job_id in api.published.erasures
    for method, path, body in (
        ("GET", "/v1/sessions/doomed", None),
        ("GET", "/v1/sessions/doomed/entries", None),
        ("POST", "/v1/sessions/doomed/entries", {"entries": [_user("more")]}),
        ("GET", "/v1/sessions/doomed/context", None),
        ("POST", "/v1/sessions/doomed/flush", {}),
    ):
        assert a.request(method, path, json=body).status_code == 404, (method, path)
    assert "doomed" not in [s["id"] for s in a.get("/v1/sessions").json()["sessions"]]
    queued = a.get(f"/v1/jobs/{job_id}").json()
    assert (queued["kind"], queued["erases"], queued["state"]) == ("erasure", "session", "queued")
    assert b.get(f"/v1/jobs/{job_id}").status_code == 404
    assert a.delete("/v1/sessions/doomed").json()["job_id"] == job_id

    run = run_erasure_job(api.store, api.redis, job_id, chunk=10)
    assert run.outcome == "succeeded"
    done = a.get(f"/v1/jobs/{job_id}").json()
    assert done["state"] == "succeeded" and done["counts"]["entries"] == 1
    assert a.delete("/v1/sessions/doomed").json()["job_id"] == job_id
    assert a.delete("/v1/sessions/never-was").status_code == 404
    # The id is free again.
    assert a.post("/v1/sessions", json={"id": "doomed"}).status_code == 201


def test_erasing_a_subject_takes_every_session_naming_it(backend_api: LiveApi) -> None:
    api = backend_api
    _, a = api.tenant()
    _, b = api.tenant()
    for session, subject in (("s1", "u@example.com"), ("s2", "u@example.com"), ("s3", "v")):
        body = {"id": session, "metadata": {"subject": subject, "plan": "pro"}}
        assert a.post("/v1/sessions", json=body).status_code == 201
    assert (
        b.post(
            "/v1/sessions", json={"id": "s1", "metadata": {"subject": "u@example.com"}}
        ).status_code
        == 201
    )
    answer = a.delete("/v1/subjects/u@example.com")
    assert answer.status_code == 202
    job_id = answer.json()["job_id"]
    assert a.get("/v1/sessions/s1").status_code == 404
    assert a.get("/v1/sessions/s2").status_code == 404
    assert a.get("/v1/sessions/s3").status_code == 200
    assert b.get("/v1/sessions/s1").status_code == 200  # the same subject at another tenant
    run = run_erasure_job(api.store, api.redis, job_id, chunk=10)
    assert run.outcome == "succeeded" and run.counts["sessions"] == 2
    bad = a.post("/v1/sessions", json={"metadata": {"subject": ["not", "a", "string"]}})
    assert bad.status_code == 422 and "subject" in bad.text
    assert a.delete("/v1/subjects/with%20space").status_code == 422


def test_both_clients_erase_and_refuse_a_bad_subject_before_sending(api: LiveApi) -> None:
    _, a = api.tenant()
    key = str(a.headers["authorization"]).removeprefix("Bearer ")
    with OMClient(api.url, key) as om:
        om.create_session("sync-one", metadata={"subject": "carol"})
        ticket = om.erase_session("sync-one")
        assert om.job(ticket.job_id).erases == "session"
        with pytest.raises(InvalidRequest, match="subject"):
            om.erase_subject("has space")

    async def run() -> None:
        async with AsyncOMClient(api.url, key) as aom:
            await aom.create_session("async-one", metadata={"subject": "dave"})
            by_subject = await aom.erase_subject("dave")
            job = await aom.job(by_subject.job_id)
            assert (job.kind, job.erases, job.session_id) == ("erasure", "subject", "dave")
            with pytest.raises(NotFound):
                await aom.get_session("async-one")

    asyncio.run(run())
