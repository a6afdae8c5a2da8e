"""``om doctor`` against a healthy deployment (a real worker, a reconciler pass sent the way beat
sends it, a local OpenAI-compatible server checking the key), then against each broken part in
turn: database down or missing or not migrated, Redis down, no worker, a bad provider key. Each
failure is named with its fix; the exit code says whether anything failed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner, Result

from om_api.cli import app as om
from om_workers.celery.tasks import QUEUE, RECONCILE_TASK
from om_workers.coordination.clock import last_reconcile_pass
from om_workers.coordination.embedded import EmbeddedRedis, free_port
from tests.e2e.support import wait_for
from tests.e2e.workers import StartWorker
from tests.threads import serving

KEY = "sk-doctor-0123456789abcdef"


@contextmanager
def models_server() -> Iterator[str]:
    """An OpenAI-compatible model list: 200 for ``Bearer KEY``, 401 for anything else."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            good = self.path == "/models" and self.headers.get("authorization") == f"Bearer {KEY}"
            body = json.dumps({"data": [{"id": "gpt-x"}]} if good else {"error": "bad key"})
            self.send_response(200 if good else 401)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with serving(httpd):
        yield f"http://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture
def healthy_env(
    redis_server: EmbeddedRedis,
    database_url: str,
    start_worker: StartWorker,
    client: redis.Redis,
    app: Any,
) -> Iterator[dict[str, str]]:
    with models_server() as provider_url:
        env = {
            "OM_REDIS_URL": redis_server.url,
            "OM_DATABASE_URL": database_url,
            "OM_PROVIDER": "openai",
            "OM_PROVIDER_BASE_URL": provider_url,
            "OM_PROVIDER_API_KEY": KEY,
        }
        start_worker()
        # What beat does every OM_RECONCILE_INTERVAL_S: send om.reconcile to the workers.
        app.send_task(RECONCILE_TASK, queue=QUEUE)
        wait_for(lambda: last_reconcile_pass(client) is not None, 30, "a reconciler pass")
        yield env


def doctor(env: dict[str, str], **changes: str) -> tuple[Result, dict[str, dict[str, Any]]]:
    result = CliRunner().invoke(om, ["doctor", "--json"], env={**env, **changes})
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert KEY not in result.stdout
    return result, checks


def assert_fails(checks: dict[str, dict[str, Any]], name: str, found: str, fix: str) -> None:
    check = checks[name]
    assert check["status"] == "fail", check
    assert found in check["detail"] and fix in check["fix"], check


def test_healthy_then_each_broken_part_named_with_its_fix(
    healthy_env: dict[str, str], tmp_path: Path
) -> None:
    result, checks = doctor(healthy_env)
    assert result.exit_code == 0, checks
    assert {c["status"] for c in checks.values()} == {"ok"}, checks
    assert "key accepted" in checks["provider"]["detail"]
    assert "task slots" in checks["workers"]["detail"]
    text = CliRunner().invoke(om, ["doctor"], env=healthy_env)
    assert text.exit_code == 0 and text.stdout.count("\n") == len(checks)

    closed = free_port()
    result, checks = doctor(
        healthy_env, OM_DATABASE_URL=f"postgresql://om:pg-secret-pw@127.0.0.1:{closed}/om"
    )
    assert result.exit_code == 1
    assert_fails(checks, "database", "unreachable", "start the database")
    assert "pg-secret-pw" not in result.stdout
    assert checks["redis"]["status"] == "ok"

    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    _, checks = doctor(healthy_env, OM_DATABASE_URL=missing)
    assert_fails(checks, "database", "does not exist", "OM_DATABASE_URL")
    assert not (tmp_path / "missing.db").exists()  # the check created nothing

    (tmp_path / "empty.db").touch()
    _, checks = doctor(healthy_env, OM_DATABASE_URL=f"sqlite:///{tmp_path / 'empty.db'}")
    assert_fails(checks, "database", "never migrated", "(om db upgrade)")

    result, checks = doctor(healthy_env, OM_REDIS_URL=f"redis://:rd-secret-pw@127.0.0.1:{closed}/0")
    assert result.exit_code == 1
    assert_fails(checks, "redis", "unreachable", "start Redis")
    assert "rd-secret-pw" not in result.stdout
    assert {checks[n]["status"] for n in ("workers", "beat", "clocks")} == {"skip"}
    result, checks = doctor(healthy_env, OM_DATABASE_URL="om:pg-secret-pw@nowhere")
    assert_fails(checks, "database", "not a database URL", "OM_DATABASE_URL")
    assert "pg-secret-pw" not in result.stdout

    broker = f"amqp://om:mq-secret-pw@127.0.0.1:{closed}//"
    result, checks = doctor(healthy_env, OM_BROKER_URL=broker)
    assert result.exit_code == 1
    assert_fails(checks, "broker", "unreachable", "OM_BROKER_URL")
    assert "mq-secret-pw" not in result.stdout

    result, checks = doctor(healthy_env, OM_PROVIDER_API_KEY="sk-wrong-key-000000")
    assert result.exit_code == 1
    assert_fails(checks, "provider", "refused the configured key (HTTP 401)", "OM_PROVIDER_API_KEY")
    assert "sk-wrong-key-000000" not in json.dumps(checks)


def test_no_worker_and_no_beat(database_url: str) -> None:
    with EmbeddedRedis() as empty:
        result, checks = doctor(
            {
                "OM_REDIS_URL": empty.url,
                "OM_DATABASE_URL": database_url,
                "OM_PROVIDER": "extractive",
            }
        )
    assert result.exit_code == 1
    assert_fails(checks, "workers", "no live worker", "(om worker)")
    assert_fails(checks, "beat", "no reconciler pass", "(om beat)")
    assert checks["database"]["status"] == checks["redis"]["status"] == "ok"
    assert checks["clocks"]["status"] == "ok"
