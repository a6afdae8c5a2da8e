"""The API's log lines carry the work's context under the field names the workers use.

A real ``om api`` process (uvicorn, SQLite, a private Redis): every line it writes to stderr is
one JSON object, each request line names the request, and the tenant, session and job it was
about once they are known; a line logged inside a handler carries them too.
"""

from __future__ import annotations

import contextvars
import io
import json
import logging
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from fastapi import APIRouter

from om_api.server.auth import TenantId
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.logs import HANDLER_NAME, bind_log_context, configure_json_logging, log_context
from om_workers.store import SqlStore, upgrade
from tests.api.conftest import make_settings
from tests.api.processes import ApiProcess, api_process
from tests.api.seed import conversation
from tests.api.server import Published, serve

ADMIN_TOKEN = "admin-token-for-log-tests-0123456789"


class LoggedApi:
    """What the tests read of a running ``om api``'s JSON log."""

    def __init__(self, api: ApiProcess) -> None:
        self.api = api
        self.url = api.url

    def records(self) -> list[dict[str, Any]]:
        """Every stderr line so far, parsed (fails on a line that is not one JSON object)."""
        return [json.loads(line) for line in list(self.api.lines) if line.strip()]

    def requests(self, request_id: str) -> list[dict[str, Any]]:
        """The request lines of the request sent with ``X-Request-ID: request_id``."""
        deadline = time.monotonic() + 10
        while True:
            found = [
                r
                for r in self.records()
                if r["message"] == "request" and r.get("request_id") == request_id
            ]
            # The line is written after the response went out: wait for it, briefly.
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.05)


@pytest.fixture
def redis_for_api() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def om_api(redis_for_api: EmbeddedRedis, tmp_path: Path) -> Iterator[LoggedApi]:
    database_url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(database_url)
    # Reads limited at 30/s take leases of one: every read asks Redis (see the outage below).
    with api_process(
        database_url, redis_for_api.url, OM_ADMIN_TOKEN=ADMIN_TOKEN, OM_RATE_READS_PER_S="30"
    ) as api:
        yield LoggedApi(api)


def _request_id(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_api_log_lines_name_the_request_tenant_session_and_job(
    om_api: LoggedApi, redis_for_api: EmbeddedRedis
) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    tenant_id, session_id = f"t-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=om_api.url, timeout=30) as http:
        assert http.post("/v1/admin/tenants", json={"id": tenant_id}, headers=admin).is_success
        keys_rid = _request_id("keys")
        created = http.post(
            f"/v1/admin/tenants/{tenant_id}/keys",
            json={"label": "logs"},
            headers={**admin, "X-Request-ID": keys_rid},
        )
        key = created.json()["key"]
        tenant = {"Authorization": f"Bearer {key}"}
        assert http.post("/v1/sessions", json={"id": session_id}, headers=tenant).is_success
        append_rid = _request_id("append")
        appended = http.post(
            f"/v1/sessions/{session_id}/entries",
            json={"entries": conversation(2)},
            headers={**tenant, "X-Request-ID": append_rid},
        )
        assert appended.is_success, appended.text
        flush_rid = _request_id("flush")
        flushed = http.post(
            f"/v1/sessions/{session_id}/flush", headers={**tenant, "X-Request-ID": flush_rid}
        )
        assert flushed.status_code == 202, flushed.text
        job_id = flushed.json()["job_id"]
        job_rid = _request_id("job")
        job = http.get(f"/v1/jobs/{job_id}", headers={**tenant, "X-Request-ID": job_rid})
        assert job.status_code == 200, job.text
        anonymous_rid = _request_id("anonymous")
        refused = http.get(f"/v1/sessions/{session_id}", headers={"X-Request-ID": anonymous_rid})
        assert refused.status_code == 401
        health_rid = _request_id("health")
        assert http.get("/healthz", headers={"X-Request-ID": health_rid}).status_code == 200

        # A line logged inside a handler: with Redis gone, the rate limiter lets the request
        # through and says so; that line names the request, tenant and session as well.
        redis_for_api.stop()
        outage_rid = _request_id("outage")
        read = http.get(
            f"/v1/sessions/{session_id}", headers={**tenant, "X-Request-ID": outage_rid}
        )
        assert read.status_code == 200, read.text

    def context(record: dict[str, Any]) -> dict[str, Any]:
        return {k: record[k] for k in ("tenant_id", "session_id", "job_id") if k in record}

    (keys_line,) = om_api.requests(keys_rid)
    assert context(keys_line) == {"tenant_id": tenant_id}  # the admin route's path tenant
    (append_line,) = om_api.requests(append_rid)
    assert context(append_line) == {"tenant_id": tenant_id, "session_id": session_id}
    (flush_line,) = om_api.requests(flush_rid)
    assert context(flush_line) == {
        "tenant_id": tenant_id,
        "session_id": session_id,
        "job_id": job_id,
    }
    assert flush_line["status"] == 202 and flush_line["route"].endswith("/flush")
    (job_line,) = om_api.requests(job_rid)
    assert context(job_line) == {"tenant_id": tenant_id, "job_id": job_id}
    (anonymous_line,) = om_api.requests(anonymous_rid)
    # Unauthenticated: the session the path names, no tenant.
    assert context(anonymous_line) == {"session_id": session_id}
    assert anonymous_line["status"] == 401
    (health_line,) = om_api.requests(health_rid)
    assert context(health_line) == {}  # nothing left over from the requests before
    (outage_line,) = om_api.requests(outage_rid)
    assert context(outage_line) == {"tenant_id": tenant_id, "session_id": session_id}
    inside = [
        r
        for r in om_api.records()
        if r.get("request_id") == outage_rid and r["message"].startswith("rate limit not checked")
    ]
    assert inside and all(
        context(r) == {"tenant_id": tenant_id, "session_id": session_id} for r in inside
    ), inside
    log = "\n".join(om_api.api.lines)
    assert key not in log and ADMIN_TOKEN not in log


def test_an_unhandled_error_is_logged_with_the_request_context(
    api_redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    """Starlette logs an unhandled exception in its outermost layer, after every middleware;
    the request's log context is opened outside that layer, so the line names the request."""
    database_url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    client: redis.Redis = connect(api_redis_server.url)
    router = APIRouter()

    @router.get("/v1/sessions/{session_id}/test-fails")
    def fails(tenant_id: TenantId, session_id: str) -> None:
        raise RuntimeError("a fault no handler knows")

    logger = logging.getLogger("om_api")
    buffer = io.StringIO()
    capture = logging.StreamHandler(buffer)
    try:
        with serve(
            make_settings(database_url, api_redis_server.url),
            store,
            client,
            Published(),
            routers=[router],
        ) as live:
            formatter = next(h for h in logger.handlers if h.get_name() == HANDLER_NAME).formatter
            capture.setFormatter(formatter)
            logger.addHandler(capture)
            tenant_id, http = live.tenant()
            with http:
                answer = http.get("/v1/sessions/s-1/test-fails", headers={"X-Request-ID": "boom-1"})
            assert answer.status_code == 500
    finally:
        logger.removeHandler(capture)
        client.close()
        store.close()
    records = [json.loads(line) for line in buffer.getvalue().splitlines()]
    (error,) = [r for r in records if r["message"] == "unhandled error"]
    assert "a fault no handler knows" in error["exception"]
    assert (error.get("request_id"), error.get("tenant_id"), error.get("session_id")) == (
        "boom-1",
        tenant_id,
        "s-1",
    )


def test_a_field_bound_in_a_copied_context_reaches_its_block_and_no_further(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What a sync route does: it runs on a copy of the request's context in another thread,
    and what it binds is on the lines the request logs after it; nothing outlives the block."""
    configure_json_logging(["om.test.bind"], "INFO")
    log = logging.getLogger("om.test.bind")
    bind_log_context(tenant_id="nowhere")  # outside any block: nothing to describe
    with log_context(request_id="r1"):
        copy = contextvars.copy_context()
        worker = threading.Thread(
            target=copy.run, args=(bind_log_context,), kwargs={"tenant_id": "t1"}
        )
        worker.start()
        worker.join()
        log.info("inside")
    log.info("after")
    inside, after = (json.loads(line) for line in capsys.readouterr().err.splitlines())
    assert (inside.get("request_id"), inside.get("tenant_id")) == ("r1", "t1")
    assert "request_id" not in after and "tenant_id" not in after


# In a child interpreter: configuring the API's logging replaces this process's handlers.
_EVERY_LOGGER = """
import logging
from om_api.server.logging import SecretRegistry, configure_logging

secret = "sk-api-log-secret-0123456789"
configure_logging(SecretRegistry([secret]), "INFO")
logging.getLogger("om_workers.store.sessions").warning("store said %s", secret)
logging.getLogger("om_core.flush").info("core at the API's level")
logging.getLogger("sqlalchemy.pool").warning("a library's warning with %s", secret)
logging.getLogger("sqlalchemy.pool").info("a library's info")
"""


def test_every_record_of_the_api_process_is_redacted_json() -> None:
    """The store's and Redis code's records (``om_workers``, ``om_core``) at the API's level,
    and any library's warnings, go out as redacted JSON, not through Python's plain
    last-resort handler."""
    done = subprocess.run(
        [sys.executable, "-c", _EVERY_LOGGER], capture_output=True, text=True, check=True
    )
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(r["logger"], r["level"]) for r in records] == [
        ("om_workers.store.sessions", "warning"),
        ("om_core.flush", "info"),
        ("sqlalchemy.pool", "warning"),
    ]
    assert "sk-api-log-secret-0123456789" not in done.stderr
    assert records[0]["message"].startswith("store said ")
