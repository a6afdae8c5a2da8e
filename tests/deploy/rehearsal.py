"""A local rehearsal of ``deploy/compose.yaml`` without Docker: every om service runs as a
process from the command and environment the compose file gives it.

What differs from the containers, and why:

- ``redis`` and ``postgres`` are not started from their images: a private Redis
  (:class:`~om_workers.coordination.embedded.EmbeddedRedis`, ``noeviction`` like the compose one)
  and a fresh database on the local PostgreSQL (127.0.0.1:5432, user ``postgres``) stand in, so
  ``OM_REDIS_URL`` and ``OM_DATABASE_URL`` point at them;
- ``om`` is ``python -m om_api.cli`` of this checkout, ``--host`` is 127.0.0.1 and every
  ``--port`` a free one (nothing binds another interface);
- each worker gets ``--name om-worker<i>@%h``: containers have distinct hostnames, these
  processes share one;
- short time limits, a slowed offline provider and low memory thresholds (``OVERRIDES``), so a
  killed worker's messages come back within seconds and every flush observes something.

``python -m tests.deploy.rehearsal --workers 3`` (``make rehearsal WORKERS=3``) runs it with a
load of flushes and one worker killed mid-load; ``--no-kill --rounds 1`` measures throughput.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import httpx

from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import SessionEntry
from om_workers.coordination.embedded import EmbeddedRedis, free_port
from om_workers.jobs.reconcile import LOST_JOB_ERROR
from om_workers.store.jobs import STUCK_JOB_ERROR
from tests.deploy.topology import DEPLOY, ROOT, ComposeService, compose_services, example_env

HOST: Final = "127.0.0.1"
PG: Final = ("-h", HOST, "-p", "5432", "-U", "postgres")
FINAL: Final = frozenset({"succeeded", "failed", "skipped"})
START_ORDER: Final = ("api", "worker", "beat", "flower")
READY_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 10.0

OVERRIDES: Final = {
    "OM_PROVIDER": "tests.e2e.providers:slow",
    "OM_SETTINGS_JSON": json.dumps(
        {
            "observation": {"messageTokens": 1},
            "reflection": {"observationTokens": 1_000_000},
            "context": {"observationsPoolMaxTokens": 1_000_000},
        }
    ),
    "OM_HTTP_TIMEOUT_S": "5",
    "OM_SOFT_TIME_LIMIT_S": "6",
    "OM_HARD_TIME_LIMIT_S": "8",
    "OM_VISIBILITY_TIMEOUT_S": "10",
    "OM_LOCK_TTL_S": "4",
    "OM_RECONCILE_INTERVAL_S": "3",
}
"""Settings the rehearsal adds to the compose environment (see the module docstring)."""


class RehearsalError(RuntimeError):
    """A service did not start or the load did not complete; the message quotes the log."""


def postgres_available() -> str | None:
    """``None`` when the local PostgreSQL answers, else why not."""
    try:
        done = subprocess.run(["pg_isready", *PG], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"pg_isready failed: {exc}"
    return None if done.returncode == 0 else f"PostgreSQL on {HOST}:5432: {done.stdout.strip()}"


@dataclass(frozen=True)
class Config:
    """The rehearsal's size: ``workers`` processes of ``concurrency`` slots, ``sessions``
    sessions, ``rounds`` of (append ``turns`` user/assistant pairs, flush) each, and the
    provider's delay per call. ``kill`` stops worker 0 with that signal after round 1."""

    workers: int = 3
    concurrency: int = 4
    sessions: int = 8
    rounds: int = 4
    turns: int = 2
    provider_delay_s: float = 0.3
    kill: signal.Signals | None = signal.SIGKILL
    timeout_s: float = 60.0


@dataclass
class Report:
    """What happened: timings in seconds, counts of jobs by final state, runs redelivered."""

    started_s: float = 0.0
    load_s: float = 0.0
    settle_s: float = 0.0
    jobs: dict[str, str] = field(default_factory=dict)
    messages: int = 0
    observations: int = 0
    redelivered: int = 0
    killed_pid: int | None = None
    runs_per_s: float = 0.0

    def states(self) -> Counter[str]:
        return Counter(self.jobs.values())


@dataclass
class _Process:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    argv: list[str]
    env: dict[str, str]


class Rehearsal:
    """The topology as local processes; :meth:`start`, :meth:`run_load`, :meth:`stop`."""

    def __init__(self, config: Config, say: Callable[[str], None] = lambda _m: None) -> None:
        self.config = config
        self.say = say
        self.services = compose_services(example_env())
        self.processes: list[_Process] = []
        self.redis: EmbeddedRedis | None = None
        self.database: str | None = None
        self.database_url = ""
        self.api_url = ""
        self.api_key = ""
        self._tmp = tempfile.TemporaryDirectory(prefix="om-rehearsal-")
        self.log_dir = Path(self._tmp.name)

    # Starting ----------------------------------------------------------------------------------

    def command(self, service: ComposeService, extra: tuple[str, ...] = ()) -> list[str]:
        """The compose command of ``service`` as a local process (see the module docstring)."""
        argv = [*service.command, *extra]
        assert argv[0] == "om", argv
        local = [sys.executable, "-m", "om_api.cli", *argv[1:]]
        for flag, value in (("--host", lambda: HOST), ("--port", lambda: str(free_port()))):
            if flag in local:
                local[local.index(flag) + 1] = value()
        return local

    def environment(self, service: ComposeService, **extra: str) -> dict[str, str]:
        """The compose environment of ``service`` with the local stores and ``OVERRIDES``."""
        assert self.redis is not None
        env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
        env.update(service.environment)
        if "OM_DATABASE_URL" in env:
            env["OM_DATABASE_URL"] = self.database_url
        if "OM_REDIS_URL" in env:
            env["OM_REDIS_URL"] = self.redis.url
        if "OM_WORKER_METRICS_HOST" in env:
            env["OM_WORKER_METRICS_HOST"] = HOST
        if "OM_WORKER_METRICS_PORT" in env:
            env["OM_WORKER_METRICS_PORT"] = str(free_port())
        env.update(OVERRIDES)
        env["OM_WORKER_CONCURRENCY"] = str(self.config.concurrency)
        env["OM_TEST_PROVIDER_DELAY_S"] = str(self.config.provider_delay_s)
        env["PYTHONPATH"] = str(ROOT)  # the slow test provider lives in tests/
        env.update(extra)
        return env

    def start(self) -> None:
        """Database, Redis, migration, API key, then every service; waits until each answers.

        Raises :class:`RehearsalError` (quoting the log) when one exits or is not ready in time.
        """
        began = time.monotonic()
        self.database = f"om_rehearsal_{secrets.token_hex(4)}"
        subprocess.run(["createdb", *PG, self.database], check=True, capture_output=True)
        self.database_url = f"postgresql+psycopg://postgres@{HOST}:5432/{self.database}"
        self.redis = EmbeddedRedis()
        self.redis.start()
        self.say(f"postgres  {self.database}; redis {self.redis.url} (pid {self.redis.pid})")

        migrate = self.services["migrate"]
        done = self._run_once(self.command(migrate), self.environment(migrate))
        self.say(f"migrate   {done.strip()}")
        api = self.services["api"]
        keys = [*self.command(api)[:3], "keys", "create", "--tenant", "rehearsal"]
        self.api_key = self._run_once(keys, self.environment(migrate)).strip().splitlines()[0]

        for name in START_ORDER:
            service = self.services[name]
            if name == "worker":
                for i in range(self.config.workers):
                    argv = self.command(service, ("--name", f"om-worker{i}@%h"))
                    self._spawn(f"worker{i}", argv, self.environment(service))
            else:
                self._spawn(name, self.command(service), self.environment(service))
        api_process = self.process("api")
        port = api_process.argv[api_process.argv.index("--port") + 1]
        self.api_url = f"http://{HOST}:{port}"
        deadline = time.monotonic() + READY_TIMEOUT_S
        for process in self.processes:
            self._wait_healthy(process, deadline)
        self.say(f"ready     {len(self.processes)} processes in {time.monotonic() - began:.1f} s")

    def process(self, name: str) -> _Process:
        return next(p for p in self.processes if p.name == name)

    def _run_once(self, argv: list[str], env: dict[str, str]) -> str:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RehearsalError(f"{argv[3:]} exited {done.returncode}: {done.stderr[-2000:]}")
        return done.stdout

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(_Process(name, process, log, argv, env))

    def healthcheck(self, process: _Process) -> subprocess.CompletedProcess[str]:
        """The image's ``om-healthcheck`` run against this process (by its pid)."""
        script = str(DEPLOY / "healthcheck.py")
        return subprocess.run(
            [sys.executable, script, str(process.process.pid)],
            env=process.env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def _wait_healthy(self, process: _Process, deadline: float) -> None:
        while True:
            if process.process.poll() is not None:
                raise RehearsalError(f"{process.name} exited: {_tail(process.log)}")
            check = self.healthcheck(process)
            if check.returncode == 0:
                self.say(f"healthy   {process.name}: {check.stdout.strip()}")
                return
            if time.monotonic() > deadline:
                raise RehearsalError(
                    f"{process.name} not healthy: {check.stderr.strip()} {_tail(process.log)}"
                )
            time.sleep(0.5)

    # The load ----------------------------------------------------------------------------------

    def run_load(self) -> Report:
        """Sessions through the API: each round appends messages and asks for a flush; after
        round 1 worker 0 is stopped. Waits until every job is final and checks the memory.

        Raises :class:`RehearsalError` when a job does not finish in ``timeout_s`` and
        ``AssertionError`` when a run failed or a session's memory is wrong.
        """
        config = self.config
        report = Report()
        began = time.monotonic()
        headers = {"Authorization": f"Bearer {self.api_key}"}
        sessions = [f"rh-{i:02d}" for i in range(config.sessions)]
        messages: dict[str, list[str]] = {s: [] for s in sessions}
        requests: dict[str, list[tuple[int, str, bool]]] = {s: [] for s in sessions}
        with httpx.Client(base_url=self.api_url, headers=headers, timeout=30) as client:
            for session in sessions:
                _ok(_post(client, "/v1/sessions", {"id": session}), 201)
            for rnd in range(config.rounds):
                for session in sessions:
                    entries = _chat(session, rnd, config.turns)
                    body = {"entries": entries}
                    _ok(_post(client, f"/v1/sessions/{session}/entries", body), 201)
                    messages[session] += [e["id"] for e in entries]
                    flush = _ok(_post(client, f"/v1/sessions/{session}/flush", {}), 202)
                    report.jobs[flush["job_id"]] = "queued"
                    requests[session].append((rnd, flush["job_id"], flush["coalesced"]))
                if rnd == 0 and config.kill is not None:
                    time.sleep(min(1.0, 2 * config.provider_delay_s))  # runs are in flight
                    victim = self.process("worker0").process
                    victim.send_signal(config.kill)
                    report.killed_pid = victim.pid
                    self.say(f"killed    worker0 (pid {victim.pid}) with {config.kill.name}")
            report.load_s = time.monotonic() - began
            deadline = time.monotonic() + config.timeout_s
            pending = set(report.jobs)
            while pending:
                for job in list(pending):
                    state = _ok(_send(client, "GET", f"/v1/jobs/{job}"), 200)["state"]
                    report.jobs[job] = state
                    if state in FINAL:
                        pending.discard(job)
                if pending and time.monotonic() > deadline:
                    raise RehearsalError(f"{len(pending)} jobs not final: {sorted(pending)[:5]}")
                if pending:
                    time.sleep(0.25)
            report.settle_s = time.monotonic() - began - report.load_s
            jobs = [_ok(_send(client, "GET", f"/v1/jobs/{job}"), 200) for job in report.jobs]
            for session in sessions:
                try:
                    report.observations += _check_memory(client, session, messages[session])
                except AssertionError as exc:
                    runs = [
                        {k: job[k] for k in ("id", "state", "attempts", "error", "started_at")}
                        for job in jobs
                        if job["session_id"] == session
                    ]
                    asked = requests[session]
                    raise AssertionError(f"{exc}; flushes {asked}; runs {runs}") from None
        report.messages = sum(len(ids) for ids in messages.values())
        report.redelivered = sum(1 for job in jobs if job["attempts"] > 1)
        ran = [job for job in jobs if job["started_at"] and job["finished_at"]]
        if ran:
            first = min(datetime.fromisoformat(job["started_at"]) for job in ran)
            last = max(datetime.fromisoformat(job["finished_at"]) for job in ran)
            span = (last - first).total_seconds()
            report.runs_per_s = len(ran) / span if span > 0 else 0.0
        # A job of the killed worker is swept by the reconciler once its lock expired (or,
        # on a loaded machine, before its redelivery runs); the sweep re-requests its
        # session, and the memory check above proves that work was done. Any other failure is
        # a failure.
        failed = {
            job["id"]: job["error"]
            for job in jobs
            if job["state"] == "failed" and job["error"] not in (STUCK_JOB_ERROR, LOST_JOB_ERROR)
        }
        assert not failed, f"failed jobs: {failed}"
        return report

    # Stopping ----------------------------------------------------------------------------------

    def pids(self) -> list[int]:
        pids = [p.process.pid for p in self.processes]
        if self.redis is not None and self.redis.pid is not None:
            pids.append(self.redis.pid)
        return pids

    def stop(self) -> None:
        """SIGTERM every process group, SIGKILL after :data:`STOP_TIMEOUT_S`; Redis, the
        database and the logs go too. Safe to call twice."""
        processes, self.processes = self.processes, []
        for process in processes:
            _signal_group(process.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in processes:
            try:
                process.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(process.process.pid, signal.SIGKILL)
                process.process.wait()
            _signal_group(process.process.pid, signal.SIGKILL)
        redis_server, self.redis = self.redis, None
        if redis_server is not None:
            redis_server.stop()
        database, self.database = self.database, None
        if database is not None:
            subprocess.run(
                ["dropdb", *PG, "--if-exists", "--force", database],
                check=False,
                capture_output=True,
            )
        self._tmp.cleanup()


def _chat(session: str, rnd: int, turns: int) -> list[dict[str, Any]]:
    entries = []
    for turn in range(turns):
        n = rnd * turns + turn
        for role, text in (
            ("user", f"Question {n}: what is the status of ticket {n} in project {session}?"),
            ("assistant", f"Ticket {n} is resolved; the fix shipped on day {n} for {session}."),
        ):
            entry_id = f"{session}-r{rnd}-t{turn}-{role}"
            entries.append(
                {"id": entry_id, "kind": "message", "message": {"role": role, "content": text}}
            )
    return entries


def _check_memory(client: httpx.Client, session: str, messages: list[str]) -> int:
    """Every message observed exactly once, no observation recorded twice; returns how many."""
    entries: list[SessionEntry] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 500, **({"after": after} if after else {})}
        page = _ok(_send(client, "GET", f"/v1/sessions/{session}/entries", params=params), 200)
        entries += [SessionEntry.model_validate(entry) for entry in page["entries"]]
        after = page["next_cursor"]
        if after is None:
            break
    ledger = fold_ledger(entries)
    sources = Counter(sid for o in ledger.observations for sid in o.source_entry_ids)
    assert set(sources) == set(messages), f"{session}: unobserved {set(messages) - set(sources)}"
    twice = sorted(sid for sid, n in sources.items() if n > 1)
    assert not twice, f"{session}: observed twice: {twice}"
    ids = Counter(o.id for o in ledger.observations)
    assert all(n == 1 for n in ids.values()), f"{session}: an observation recorded twice"
    return len(ledger.observations)


def _send(client: httpx.Client, method: str, url: str, **options: Any) -> httpx.Response:
    """One request as an agent server would send it: a 429 (the key's rate limit) is retried
    after its ``Retry-After``, up to 30 times; anything else is returned as it came."""
    for _ in range(29):
        response = client.request(method, url, **options)
        if response.status_code != 429:
            return response
        time.sleep(float(response.headers.get("retry-after", "1")))
    return client.request(method, url, **options)


def _post(client: httpx.Client, url: str, body: Any) -> httpx.Response:
    return _send(client, "POST", url, json=body)


def _ok(response: httpx.Response, status: int) -> Any:
    if response.status_code != status:
        raise RehearsalError(f"{response.request.url}: {response.status_code} {response.text}")
    return response.json()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--provider-delay", type=float, default=0.3)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--kill", choices=("SIGKILL", "SIGTERM"), default="SIGKILL")
    parser.add_argument("--no-kill", action="store_true", help="stop no worker mid-load")
    args = parser.parse_args(argv)
    if (reason := postgres_available()) is not None:
        print(f"rehearsal needs PostgreSQL: {reason}", file=sys.stderr)
        return 2
    config = Config(
        workers=args.workers,
        concurrency=args.concurrency,
        sessions=args.sessions,
        rounds=args.rounds,
        turns=args.turns,
        provider_delay_s=args.provider_delay,
        kill=None if args.no_kill else signal.Signals[args.kill],
        timeout_s=args.timeout,
    )
    rehearsal = Rehearsal(config, say=print)
    began = time.monotonic()
    try:
        rehearsal.start()
        report = rehearsal.run_load()
    except (RehearsalError, AssertionError) as exc:
        print(f"rehearsal FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        rehearsal.stop()
    print(
        f"rehearsal OK in {time.monotonic() - began:.1f} s: {len(report.jobs)} jobs "
        f"{dict(report.states())}, {report.messages} messages -> {report.observations} "
        f"observations (each once), {report.redelivered} runs redelivered; load "
        f"{report.load_s:.1f} s, settled after {report.settle_s:.1f} s more; "
        f"{report.runs_per_s:.2f} runs/s over {config.workers} worker(s) x {config.concurrency} "
        f"slots at {config.provider_delay_s} s a provider call"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
