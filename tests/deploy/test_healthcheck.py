"""deploy/healthcheck.py (the image's ``om-healthcheck``): finding the role in a command line,
and checking a live HTTP service. The worker and beat checks run in the rehearsal."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import ModuleType

import pytest

from tests.deploy.topology import DEPLOY
from tests.threads import serving


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("om_healthcheck", DEPLOY / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


healthcheck = _load()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["tini", "--", "om", "api", "--port", "8000"], ["api", "--port", "8000"]),
        (["/opt/venv/bin/python", "/opt/venv/bin/om", "worker"], ["worker"]),
        (["python", "-m", "om_api.cli", "beat"], ["beat"]),
        (["redis-server", "--port", "6379"], []),
    ],
)
def test_finds_the_om_command(argv: list[str], expected: list[str]) -> None:
    assert healthcheck.om_command(argv) == expected


def test_reads_options_in_both_spellings() -> None:
    assert healthcheck.option(["api", "--port", "81"], "--port") == "81"
    assert healthcheck.option(["api", "--port=82"], "--port") == "82"
    assert healthcheck.option(["worker", "-n", "a@b"], "--name", "-n") == "a@b"
    assert healthcheck.option(["api"], "--port") is None


def test_one_shot_commands_are_healthy() -> None:
    assert "nothing to check" in healthcheck.check(["db", "upgrade"])


class _Healthz(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def healthz_port() -> Iterator[int]:
    server = HTTPServer(("127.0.0.1", 0), _Healthz)
    with serving(server):
        yield server.server_address[1]


def test_api_check_reads_the_port_from_the_process_command_line(healthz_port: int) -> None:
    # A process whose argv looks like the API's: the script reads it from /proc/<pid>/cmdline.
    fake = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(30)",
            "om",
            "api",
            "--port",
            str(healthz_port),
        ]
    )
    try:
        script = str(DEPLOY / "healthcheck.py")
        ok = subprocess.run([sys.executable, script, str(fake.pid)], capture_output=True, text=True)
        assert ok.returncode == 0, ok.stderr
        assert f"127.0.0.1:{healthz_port}/healthz" in ok.stdout
    finally:
        fake.kill()
        fake.wait()
    dead = subprocess.run(
        [sys.executable, str(DEPLOY / "healthcheck.py"), str(os.getpid())],
        capture_output=True,
        text=True,
    )
    assert dead.returncode == 1 and "does not run an om command" in dead.stderr
