"""The ``om`` command line as a user runs it: real subprocesses, real Redis, SQLite, workers."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, inspect
from typer.testing import CliRunner

from om_api.cli import app
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import AccountStore

ROOT = Path(__file__).resolve().parents[2]
OM = [sys.executable, "-m", "om_api.cli"]
COMMANDS = (
    [], ["api"], ["worker"], ["beat"], ["flower"], ["up"], ["demo"], ["db"], ["db", "upgrade"],
    ["keys"], ["keys", "create"], ["keys", "list"], ["keys", "revoke"], ["sessions"],
    ["status"], ["view"], ["recall"],
)  # fmt: skip
UP_TIMEOUT_S = 120.0


def env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    clean.update(PYTHONPATH=str(ROOT), NO_COLOR="1", COLUMNS="120", **extra)
    return clean


def om(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*OM, *args], env=env(**extra), capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_help_everywhere() -> None:
    # The real process once (entry point, imports); every subcommand through typer's runner,
    # which runs the same app in-process (fourteen interpreters would crowd a 2-core CI box).
    top = om("--help")
    assert top.returncode == 0, top.stderr
    for name in ("api", "worker", "beat", "flower", "up", "demo", "status", "view", "recall"):
        assert name in top.stdout
    runner = CliRunner()
    for args in COMMANDS:
        result = runner.invoke(app, [*args, "--help"])
        assert result.exit_code == 0, (args, result.output)
        assert "Usage:" in result.output, args


def test_db_upgrade_creates_the_tables(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    url = f"sqlite:///{path}"
    result = om("db", "upgrade", "--database-url", url)
    assert result.returncode == 0, result.stderr
    assert "revision" in result.stdout
    engine = create_engine(url)
    try:
        tables = set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert {"tenants", "api_keys", "sessions", "flush_jobs"} <= tables
    # Again: a no-op on an up-to-date database; OM_DATABASE_URL is the default.
    assert om("db", "upgrade", OM_DATABASE_URL=url).returncode == 0


def test_keys_create_makes_a_key_that_resolves(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    assert om("db", "upgrade", "--database-url", url).returncode == 0
    first = om("keys", "create", "--tenant", "acme", OM_DATABASE_URL=url)
    second = om("keys", "create", "--tenant", "acme", "--label", "ci", "--database-url", url)
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    store = AccountStore.from_url(url)
    try:
        for result in (first, second):
            key = result.stdout.strip()
            assert store.resolve_api_key(key) == "acme"
    finally:
        store.close()
    assert first.stdout != second.stdout


def test_client_commands_fail_cleanly_without_a_server() -> None:
    result = om("status", "s-1", "--api", "http://127.0.0.1:9", "--key", "k")
    assert result.returncode == 1 and "no answer" in result.stderr


STOP_WAIT_S = 120.0
"""How long ``om up`` gets to stop after Ctrl-C: its children get 20 s before SIGKILL."""


def _stopped(process: subprocess.Popen[str], pids: dict[str, int]) -> str:
    """What ``om up`` printed until it exited; a failure naming where it and its children
    were when it did not exit within :data:`STOP_WAIT_S` (then all of them are killed)."""
    try:
        return process.communicate(timeout=STOP_WAIT_S)[0]
    except subprocess.TimeoutExpired:
        where = {name: _state(pid) for name, pid in {"om up": process.pid, **pids}.items()}
        for pid in [process.pid, *pids.values()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"om up did not stop within {STOP_WAIT_S} s of Ctrl-C: {where}")


def _state(pid: int) -> str:
    """A process's state and the kernel function it waits in (Linux ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return "gone"
    return f"{stat} in {wchan or '-'}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_up_runs_the_stack_and_stops_it_cleanly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    process = subprocess.Popen(
        [*OM, "up", "--api-port", "0", "--flower-port", "0", "--database-url", url,
         "--flower-basic-auth", "ops:s3cret"],
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
    )  # fmt: skip
    lines: list[str] = []
    try:
        deadline = time.monotonic() + UP_TIMEOUT_S
        assert process.stdout is not None
        while not any(line.startswith("Ready.") for line in lines):
            line = process.stdout.readline()
            assert line, f"om up ended early: {''.join(lines)}"
            lines.append(line)
            assert time.monotonic() < deadline, "".join(lines)

        def value(label: str) -> str:
            return next(line[len(label) :].split()[0] for line in lines if line.startswith(label))

        api_url, flower_url = value("API  "), value("Flower  ")
        key = value("API key ")
        # What a second terminal needs, as shell lines.
        exports = dict(
            line.split()[1].split("=", 1) for line in lines if line.lstrip().startswith("export ")
        )
        assert exports["OM_API_URL"] == api_url and exports["OM_API_KEY"] == key
        assert exports["OM_REDIS_URL"] == value("Redis ") and exports["OM_DATABASE_URL"] == url
        pids = json.loads(next(line for line in lines if line.startswith("PIDs"))[4:])
        assert set(pids) == {"api", "worker", "beat", "flower", "redis"}

        assert httpx.get(f"{api_url}/readyz").status_code == 200
        assert httpx.get(f"{flower_url}/api/workers").status_code == 401
        workers = httpx.get(
            f"{flower_url}/api/workers", params={"refresh": 1}, auth=("ops", "s3cret"), timeout=30
        )
        assert workers.status_code == 200
        assert any(name.startswith("om-worker@") for name in workers.json()), workers.text

        # The dev key works, and the client commands reach the API with it.
        session = f"s-{uuid.uuid4().hex[:8]}"
        headers = {"Authorization": f"Bearer {key}"}
        assert httpx.post(
            f"{api_url}/v1/sessions", json={"id": session}, headers=headers
        ).is_success
        flushed = om("flush", session, "--api", api_url, "--key", key)
        assert flushed.returncode == 0, flushed.stderr
        assert " succeeded: " in flushed.stdout and "observer below threshold" in flushed.stdout
        context = om("context", session, "--max-tokens", "1000", "--api", api_url, "--key", key)
        assert context.returncode == 0, context.stderr
        assert "not in memory yet; budget 1000 tokens" in context.stderr
        too_small = om("context", session, "--max-tokens", "10", "--api", api_url, "--key", key)
        assert too_small.returncode == 1
        assert too_small.stderr == "om: max_tokens: must be within 256..1000000, got 10\n"
        status = om("status", session, "--api", api_url, "--key", key)
        assert status.returncode == 0 and status.stdout.startswith("observations: 0 recorded")
        as_json = om("status", session, "--json", "--api", api_url, "--key", key)
        assert json.loads(as_json.stdout)["recorded_observations"] == 0
        view = om("view", session, "--full", OM_API_URL=api_url, OM_API_KEY=key)
        assert view.returncode == 0 and view.stdout.strip()
        recall = om("recall", session, "0123456789ab", "--api", api_url, "--key", key)
        assert recall.returncode == 0 and "0123456789ab: not found" in recall.stdout
        bad = om("recall", session, "nope", "--api", api_url, "--key", key)
        # Refused by the client before sending: one line naming the argument.
        assert bad.returncode == 1 and "memory_id: 'nope' is not a memory id" in bad.stderr
        sessions = om("sessions", "--api", api_url, "--key", key)
        assert sessions.returncode == 0 and session in sessions.stdout

        # The README's client tour, against this stack's worker.
        tour = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "client_tour.py")],
            env=env(OM_API_URL=api_url, OM_API_KEY=key),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert tour.returncode == 0, tour.stderr
        out = tour.stdout
        # Below the threshold the job says why, and the context still shows the messages.
        assert "flush: succeeded - observer below threshold:" in out, out
        assert "not yet in memory: 2 messages" in out, out
        assert "[user] Our staging db is pg-staging-7, port 6432." in out, out
        assert "# Observational memory" in out and "[om:" in out, out
        assert "recalled: ['Our staging db is pg-staging-7" in out, out
        assert all(_alive(pid) for pid in pids.values())
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C
        rest = _stopped(process, pids if "pids" in locals() else {})
    assert process.returncode == 0, rest
    assert "stopped." in rest
    for pid in pids.values():
        assert not _alive(pid), f"pid {pid} outlived om up"


def test_demo_runs_end_to_end() -> None:
    result = om("demo")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "observational-memory:" in out and "recent-messages:" in out
    assert "raw history" in out and "context total" in out
    assert "recall " in out and "found=True" in out


def om_worker(
    redis_url: str, tmp_path: Path, *args: str, **extra: str
) -> tuple[subprocess.Popen[bytes], Path]:
    """``om worker`` with ``args`` (and environment overrides ``extra``) on a SQLite file in
    ``tmp_path``, its output in the returned log."""
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [*OM, "worker", *args],
            env=env(
                OM_REDIS_URL=redis_url, OM_DATABASE_URL=f"sqlite:///{tmp_path / 'om.db'}", **extra
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    return process, log


def test_om_worker_exits_0_on_a_warm_shutdown(redis_server: EmbeddedRedis, tmp_path: Path) -> None:
    process, log = om_worker(redis_server.url, tmp_path, "-c", "2", "-n", "warm@%h")
    try:
        deadline = time.monotonic() + 60
        while " ready." not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()


def test_om_worker_that_dies_exits_non_zero(redis_server: EmbeddedRedis, tmp_path: Path) -> None:
    """A real worker whose consumer fails at start-up (set through Celery's own configuration
    module) logs Celery's ``Unrecoverable error`` and exits 1, so a supervisor that restarts
    on failure restarts it."""
    from tests.cli import celery_dying_worker

    process, log = om_worker(
        redis_server.url, tmp_path, "-c", "1", "-n", "dying@%h",
        CELERY_CONFIG_MODULE=celery_dying_worker.__name__,
    )  # fmt: skip
    try:
        code = process.wait(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    output = log.read_text()
    assert "Unrecoverable error" in output and celery_dying_worker.MESSAGE in output, output
    assert code == 1, output


def test_om_worker_refuses_to_start_with_a_bad_prompts_file(
    redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.toml"
    result = om(
        "worker",
        OM_REDIS_URL=redis_server.url,
        OM_DATABASE_URL=f"sqlite:///{tmp_path / 'om.db'}",
        OM_PROMPTS_FILE=str(missing),
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "OM_PROMPTS_FILE" in lines[0] and str(missing) in lines[0], lines
