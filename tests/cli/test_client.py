"""OMClient/AsyncOMClient over real HTTP: typed results and errors against a live API, and the
retry rule against a tiny local server that answers 503 with Retry-After."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from om_api.client import (
    AsyncOMClient,
    Conflict,
    InvalidRequest,
    JobTimeout,
    NotFound,
    OMClient,
    RetryPolicy,
    Unauthorized,
    Unavailable,
)
from om_api.schemas import EntryIn, MessageWire
from om_workers.coordination.embedded import free_port
from tests.api.server import ADMIN_TOKEN, METRICS_TOKEN
from tests.cli.conftest import Tenant
from tests.threads import serving

FAST = RetryPolicy(attempts=4, base_s=0.01, cap_s=0.05)


def test_metrics_with_the_metrics_token(tenant: Tenant) -> None:
    with OMClient(tenant.api.url, METRICS_TOKEN, retry=FAST) as scraper:
        assert "om_api_requests_total" in scraper.metrics()


def test_integration_path_append_flush_context(tenant: Tenant) -> None:
    with OMClient(tenant.api.url, tenant.key, retry=FAST) as om:
        session = om.create_session("s-1", {"agent": "test"})
        assert session.id == "s-1" and session.entry_count == 0
        messages = [
            MessageWire(role="user", content="What is the retry limit of the gateway?"),
            MessageWire(role="assistant", content="It is 7 attempts, per config/payments.yaml."),
        ]
        appended = om.append("s-1", messages)
        assert len(appended.appended_ids) == 2 and appended.leaf_id == appended.appended_ids[-1]
        # The same ids again: recognised as a retried append, nothing written twice.
        again = om.append(
            "s-1",
            [
                EntryIn(id=i, kind="message", message=m)
                for i, m in zip(appended.appended_ids, messages, strict=True)
            ],
        )
        assert again.appended_ids == [] and again.duplicate_ids == appended.appended_ids
        accepted = om.flush("s-1")
        job = om.job(accepted.job_id)
        assert job.id == accepted.job_id and job.state == "queued"
        with pytest.raises(JobTimeout) as timeout:
            om.wait_for_job(accepted.job_id, timeout_s=0.3)  # the recording publisher runs nothing
        assert timeout.value.job.state == "queued"
        blocks = om.context("s-1").blocks
        assert [b.id for b in blocks] == ["observational-memory", "recent-messages"]
        assert blocks[1].entry_ids == appended.appended_ids
        assert om.get_session("s-1").entry_count == 2
        assert [e.id for e in om.entries("s-1").entries] == appended.appended_ids
        assert om.status("s-1").recorded_observations == 0
        assert om.view("s-1", full=True).mode == "full"
        assert om.recall("s-1", "0123456789ab").found is False
        page = om.messages("s-1", appended.appended_ids[0])
        assert [i.entry_id for i in page.items] == appended.appended_ids[1:]
        assert om.readyz().status == "ok"
        with pytest.raises(Unauthorized):  # a tenant's key does not read the metrics
            om.metrics()
        found = om.search("gateway attempts", session_id="s-1", limit=1)
        assert [h.id for h in found.hits] == [appended.appended_ids[0]]
        assert found.next_cursor is not None
        rest = om.search("gateway attempts", session_id="s-1", cursor=found.next_cursor)
        assert [h.id for h in rest.hits] == [appended.appended_ids[1]] and rest.next_cursor is None
        assert [h.session_id for h in om.search("gateway").hits] == ["s-1"]
        with pytest.raises(InvalidRequest, match="q: the search query is empty"):
            om.search(" ")


def test_typed_errors(tenant: Tenant) -> None:
    with OMClient(tenant.api.url, "om_wrong_key", retry=FAST) as bad:
        with pytest.raises(Unauthorized) as unauthorized:
            bad.get_session("s-x")
        assert unauthorized.value.status == 401 and unauthorized.value.code == "unauthorized"
    with OMClient(tenant.api.url, tenant.key, retry=FAST) as om:
        with pytest.raises(NotFound):
            om.get_session("missing")
        om.create_session("s-2")
        with pytest.raises(Conflict):
            om.create_session("s-2")
        om.append(
            "s-2",
            [
                EntryIn(
                    id="e1",
                    kind="message",
                    message=MessageWire(role="user", content="one two three four"),
                )
            ],
        )
        with pytest.raises(Conflict):
            om.append(
                "s-2",
                [
                    EntryIn(
                        id="e1", kind="message", message=MessageWire(role="user", content="other")
                    )
                ],
            )
        with pytest.raises(InvalidRequest) as invalid:
            om.entries("s-2", after="not-on-the-branch")  # only the server can tell
        assert invalid.value.status == 422 and invalid.value.detail
        with pytest.raises(InvalidRequest) as local:
            om.recall("s-2", "not-a-memory-id")  # the client can: refused before sending
        assert local.value.status is None and "memory_id" in local.value.detail
        with pytest.raises(Unauthorized):
            om.create_tenant("t-nope")  # no admin token
    with OMClient(tenant.api.url, admin_token=ADMIN_TOKEN) as admin:
        created = admin.create_key(tenant.tenant_id, label="second")
        assert created.tenant_id == tenant.tenant_id and created.key.startswith("om_")


def test_async_client(tenant: Tenant) -> None:
    async def scenario() -> None:
        async with AsyncOMClient(tenant.api.url, tenant.key, retry=FAST) as om:
            await om.create_session("s-async")
            await om.append("s-async", [{"role": "user", "content": "hello from the async client"}])
            accepted = await om.flush("s-async", force=True)
            assert (await om.job(accepted.job_id)).state == "queued"
            assert len((await om.context("s-async")).blocks) == 2
            found = await om.search("async client", session_id="s-async")
            assert len(found.hits) == 1 and "«async» «client»" in found.hits[0].snippet
            with pytest.raises(NotFound):
                await om.status("missing")

    asyncio.run(scenario())


@contextmanager
def flaky_server(failures: int, retry_after: str) -> Iterator[tuple[str, list[float]]]:
    """A local server answering 503 + Retry-After ``failures`` times, then a healthy /healthz.
    Yields its URL and the arrival times of the requests."""
    arrivals: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            arrivals.append(time.monotonic())
            if len(arrivals) <= failures:
                body = b'{"error": "unavailable", "detail": "redis is down"}'
                self.send_response(503)
                self.send_header("Retry-After", retry_after)
            else:
                body = b'{"status": "ok", "checks": {}}'
                self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with serving(server):
        yield f"http://127.0.0.1:{server.server_address[1]}", arrivals


def test_retries_503_honouring_retry_after() -> None:
    with (
        flaky_server(failures=2, retry_after="0.3") as (url, arrivals),
        OMClient(url, "k", retry=FAST) as om,
    ):
        assert om.healthz().status == "ok"
    assert len(arrivals) == 3
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert all(gap >= 0.29 for gap in gaps), gaps  # Retry-After, not the 10 ms backoff


def test_gives_up_after_the_attempts_with_unavailable() -> None:
    with (
        flaky_server(failures=10, retry_after="0") as (url, arrivals),
        OMClient(url, "k", retry=FAST) as om,
        pytest.raises(Unavailable) as error,
    ):
        om.healthz()
    assert len(arrivals) == FAST.attempts
    assert error.value.status == 503 and error.value.code == "unavailable"


def test_async_retries_503() -> None:
    async def scenario(url: str) -> str:
        async with AsyncOMClient(url, "k", retry=FAST) as om:
            return (await om.healthz()).status

    with flaky_server(failures=1, retry_after="0.1") as (url, arrivals):
        assert asyncio.run(scenario(url)) == "ok"
    assert len(arrivals) == 2


def test_connection_refused_is_retried_then_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    with OMClient(url, "k", retry=FAST) as om, pytest.raises(Unavailable) as error:
        om.get_session("s")
    assert error.value.status is None and "no answer" in str(error.value)
    assert time.monotonic() - started < 5
