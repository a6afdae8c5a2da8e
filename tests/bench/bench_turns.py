"""13. Agent turns under load: the serving path as an agent server uses it.

Each agent loops over turns against one of 200 sessions; a turn is ``GET .../context``, then
``POST .../entries`` with the run's 4 messages (one a ~1 KB tool output), then
``POST .../flush``. 1, 8, 64 and 256 agents at once, each level for a fixed time, through one
``om api`` process (and two: ``om api --workers 2``), one ``celery worker``, a private Redis,
SQLite (and PostgreSQL when reachable), the offline extractive provider, rate limits off.
Baseline: the same load, in the same run, on a bare FastAPI app (:mod:`tests.bench.bare_api`)
with the same three routes parsing the same bodies, under the same number of uvicorn
processes. Figures: turns/s (om / bare) and the context read's p50 and p99.

``python -m tests.bench.bench_turns --quick`` runs shorter levels and prints the figures
without writing the results file (``--levels 64 --backends sqlite --processes 1`` narrow it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import create_engine

from om_workers.config import Settings
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import AccountStore, SqlStore, upgrade
from tests.e2e.workers import Worker

from .bench_history import postgres_url
from .common import Section, percentile

ROOT = Path(__file__).resolve().parents[2]
LEVELS = (1, 8, 64, 256)
PROCESSES = (1, 2)
SESSIONS = 200
LEVEL_S = 12.0
QUICK_LEVEL_S = 3.0
READY_S = 60.0
TOOL_OUTPUT = ("build log: step ok; " * 52)[:1024]


@dataclass
class Load:
    """What one level measured: completed turns in ``seconds``, each context read's time."""

    agents: int
    turns: int = 0
    seconds: float = 0.0
    context_ms: list[float] = field(default_factory=list)
    limited: int = 0
    later_ms: list[float] = field(default_factory=list)
    """The context reads after each agent's first (which opens its connection, all agents at
    once when the level starts): the load the level sustains."""

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.seconds if self.seconds else 0.0

    def p(self, share: float) -> float:
        return percentile(self.context_ms, share) if self.context_ms else float("nan")

    def later_p(self, share: float) -> float:
        return percentile(self.later_ms, share) if self.later_ms else float("nan")


@dataclass
class Config:
    """One measured set-up: a store and a number of API processes."""

    backend: str
    processes: int
    om: dict[int, Load] = field(default_factory=dict)
    bare: dict[int, Load] = field(default_factory=dict)


@dataclass(frozen=True)
class Stack:
    """A running service under load: its URL, an API key, the sessions, the API's pid."""

    url: str
    key: str
    sessions: list[str]
    api_pid: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A server subprocess on ``port``, logging to ``log``, ended by its pid."""

    def __init__(self, name: str, args: Sequence[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                list(args), cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )

    def wait_ready(self, url: str) -> None:
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready in {READY_S} s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def listening(port: int) -> int:
    """Sockets listening on ``port`` (Linux ``/proc/net/tcp``): one per ``om api`` process,
    each of which accepts on a socket of its own."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as rows:
            for row in list(rows)[1:]:
                local, state = row.split()[1], row.split()[3]
                count += state == "0A" and int(local.rsplit(":", 1)[1], 16) == port
    return count


def wait_listening(port: int, processes: int) -> None:
    """Wait until every API process listens: connections opened before the last one does all
    go to the others and stay there (keep-alive)."""
    deadline = time.monotonic() + READY_S
    while listening(port) < processes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{processes} API processes did not all listen in {READY_S} s")
        time.sleep(0.2)


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    env.update(PYTHONPATH=str(ROOT))
    env.update(extra)
    return env


@contextmanager
def bare_server(tmp: Path, processes: int) -> Iterator[tuple[str, int]]:
    """The bare app under uvicorn: ``(url, pid)``."""
    port = free_port()
    args = [
        sys.executable, "-m", "uvicorn", "--factory", "tests.bench.bare_api:create_app",
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(processes),
        "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    server = Server("bare", args, base_env(), tmp / f"bare-{processes}.log")
    try:
        url = f"http://127.0.0.1:{port}"
        server.wait_ready(f"{url}/openapi.json")
        yield url, server.process.pid
    finally:
        server.stop()


@contextmanager
def om_stack(tmp: Path, database_url: str, processes: int, **env_extra: str) -> Iterator[Stack]:
    """A private Redis, the migrated store with 200 sessions, one worker and ``om api``."""
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    accounts = AccountStore(store.engine)
    tenant = accounts.create_tenant("turns").id
    key = accounts.create_api_key(tenant, "bench").plaintext
    run = uuid.uuid4().hex[:6]
    sessions = [f"agent-{run}-{n:03d}" for n in range(SESSIONS)]
    for session in sessions:
        store.create_session(tenant, session)
    store.close()
    with EmbeddedRedis() as redis_server, ExitStack() as stack:
        env = base_env(
            OM_REDIS_URL=redis_server.url,
            OM_DATABASE_URL=database_url,
            OM_PROVIDER="extractive",
            OM_RATE_LIMITS_ENABLED="false",
            OM_WORKER_CONCURRENCY="8",
        )
        env.update(env_extra)
        worker = Worker(f"turns{run}", env, tmp / f"worker-{run}.log")
        stack.callback(worker.stop)
        port = free_port()
        args = [
            sys.executable, "-m", "om_api.cli", "api", "--port", str(port), "--log-level", "warning"
        ]  # fmt: skip
        if processes > 1:
            args += ["--workers", str(processes)]
        api = Server("om api", args, env, tmp / f"api-{run}.log")
        stack.callback(api.stop)
        url = f"http://127.0.0.1:{port}"
        api.wait_ready(f"{url}/readyz")
        wait_listening(port, processes)
        worker.wait_ready()
        yield Stack(url, key, sessions, api.process.pid)


def turn_body(agent: int, turn: int) -> dict[str, object]:
    """The 4 messages of one agent run: ask, tool call, ~1 KB tool output, answer."""
    call = f"call_{agent}_{turn}"
    return {
        "entries": [
            {
                "kind": "message",
                "message": {"role": "user", "content": f"Agent {agent}, turn {turn}: deploy?"},
            },
            {
                "kind": "message",
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": call, "name": "deploy", "arguments": {"build": turn}}],
                },
            },
            {
                "kind": "message",
                "message": {
                    "role": "tool",
                    "content": TOOL_OUTPUT,
                    "tool_call_id": call,
                    "tool_name": "deploy",
                },
            },
            {
                "kind": "message",
                "message": {"role": "assistant", "content": f"Build {turn} is deployed."},
            },
        ]
    }


class Connection:
    """One agent's keep-alive HTTP/1.1 connection, written by hand so that the load generator
    costs little CPU beside the servers it measures (a shared httpx pool of 64+ connections
    spent more CPU than the bare app it drove)."""

    def __init__(self, host: str, port: int, key: str) -> None:
        self.host, self.port = host, port
        self.auth = f"Authorization: Bearer {key}\r\nHost: {host}:{port}\r\n".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: bytes | None
    ) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = f"{method} {path} HTTP/1.1\r\n".encode() + self.auth
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n".encode()
        self.writer.write(head + b"\r\n" + (body or b""))
        status_line = await self.reader.readline()
        if not status_line:
            raise RuntimeError(f"{method} {path}: connection closed")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        payload = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return status, headers, payload

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None


async def _call(
    connection: Connection, method: str, path: str, load: Load, body: bytes | None = None
) -> None:
    """One request; a 429 waits its ``Retry-After`` and retries, anything else not 2xx fails
    the benchmark (a figure over errors would be meaningless)."""
    while True:
        status, headers, payload = await connection.request(method, path, body)
        if status == 429:
            load.limited += 1
            await asyncio.sleep(float(headers.get("retry-after", "1")))
            continue
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {payload[:300]!r}")
        return


async def drive(url: str, key: str, sessions: Sequence[str], agents: int, seconds: float) -> Load:
    """``agents`` agents, each on its own connection, looping over turns for ``seconds``."""
    load = Load(agents)
    address = httpx.URL(url)
    host, port = str(address.host), int(address.port or 80)
    started = time.perf_counter()
    end = started + seconds

    async def agent(n: int) -> None:
        session = sessions[n % len(sessions)]
        connection = Connection(host, port, key)
        turn = 0
        try:
            while time.perf_counter() < end:
                before = time.perf_counter()
                await _call(connection, "GET", f"/v1/sessions/{session}/context", load)
                took = (time.perf_counter() - before) * 1000
                load.context_ms.append(took)
                if turn:
                    load.later_ms.append(took)
                body = json.dumps(turn_body(n, turn)).encode()
                await _call(connection, "POST", f"/v1/sessions/{session}/entries", load, body)
                await _call(connection, "POST", f"/v1/sessions/{session}/flush", load, b"{}")
                load.turns += 1
                turn += 1
        finally:
            await connection.close()

    await asyncio.gather(*(agent(n) for n in range(agents)))
    load.seconds = time.perf_counter() - started
    return load


async def runaway(url: str, key: str, session: str, loops: int, seconds: float) -> Load:
    """A runaway client: ``loops`` connections reading one session's context back to back
    (honouring ``Retry-After``); ``turns`` counts the reads served."""
    load = Load(loops)
    address = httpx.URL(url)
    host, port = str(address.host), int(address.port or 80)
    started = time.perf_counter()
    end = started + seconds

    async def loop() -> None:
        connection = Connection(host, port, key)
        try:
            while time.perf_counter() < end:
                await _call(connection, "GET", f"/v1/sessions/{session}/context", load)
                load.turns += 1
        finally:
            await connection.close()

    await asyncio.gather(*(loop() for _ in range(loops)))
    load.seconds = time.perf_counter() - started
    return load


@dataclass
class LimitCheck:
    """The default rate limits under the agents' load and under a runaway loop."""

    agents: Load
    runaway: Load


def measure_limits(tmp: Path, seconds: float, processes: int = 2) -> LimitCheck:
    """64 agents on one key, then a runaway loop on it, with the default limits on."""
    url = f"sqlite:///{tmp / 'limits.db'}"
    with om_stack(tmp, url, processes, OM_RATE_LIMITS_ENABLED="true") as stack:
        agents = asyncio.run(drive(stack.url, stack.key, stack.sessions, 64, seconds))
        loop = asyncio.run(runaway(stack.url, stack.key, stack.sessions[0], 64, seconds))
    print(
        f"  default limits, {processes} API processes: 64 agents {agents.turns_per_s:,.1f} "
        f"turns/s, {agents.limited} 429s; runaway loop {loop.turns_per_s:,.1f} reads/s "
        f"served, {loop.limited} 429s",
        flush=True,
    )
    return LimitCheck(agents, loop)


def analyze(database_url: str) -> None:
    """On PostgreSQL, refresh the planner's statistics as autovacuum would (it is off on the
    machine this was written on, and the branch query's plan depends on them)."""
    if not database_url.startswith("postgresql"):
        return
    engine = create_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql("ANALYZE")
    finally:
        engine.dispose()


def measure(
    config: Config, database_url: str, tmp: Path, levels: Sequence[int], seconds: float
) -> None:
    with (
        bare_server(tmp, config.processes) as (bare_url, _),
        om_stack(tmp, database_url, config.processes) as stack,
    ):
        for agents in levels:
            analyze(database_url)
            om = asyncio.run(drive(stack.url, stack.key, stack.sessions, agents, seconds))
            bare = asyncio.run(drive(bare_url, stack.key, stack.sessions, agents, seconds))
            config.om[agents], config.bare[agents] = om, bare
            print(
                f"  {config.backend}, {config.processes} process(es), {agents} agents: om "
                f"{om.turns_per_s:,.1f} turns/s, bare {bare.turns_per_s:,.1f} "
                f"(om/bare {om.turns_per_s / bare.turns_per_s:.3f}); context p50 "
                f"{om.p(0.5):,.1f} ms, p99 {om.p(0.99):,.1f} ms (bare p99 {bare.p(0.99):,.1f}), "
                f"after the first turn p99 {om.later_p(0.99):,.1f} ms (bare "
                f"{bare.later_p(0.99):,.1f}); 429s {om.limited}",
                flush=True,
            )


def measure_all(
    backends: Sequence[str], processes: Sequence[int], levels: Sequence[int], seconds: float
) -> list[Config]:
    configs: list[Config] = []
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        for backend in backends:
            for count in processes:
                config = Config("SQLite" if backend == "sqlite" else "PostgreSQL", count)
                if backend == "sqlite":
                    url = f"sqlite:///{tmp / f'turns-{count}.db'}"
                    measure(config, url, tmp, levels, seconds)
                else:
                    with postgres_url() as pg:
                        if pg is None:
                            print("  postgresql: not reachable, skipped", flush=True)
                            continue
                        measure(config, pg, tmp, levels, seconds)
                configs.append(config)
    return configs


def run() -> Section:
    configs = measure_all(("sqlite", "postgresql"), PROCESSES, LEVELS, LEVEL_S)
    with tempfile.TemporaryDirectory() as folder:
        limits = measure_limits(Path(folder), LEVEL_S)
    return report(configs, LEVEL_S, limits)


def report(configs: Sequence[Config], seconds: float, limits: LimitCheck | None = None) -> Section:
    section = Section("13. Agent turns under load (context + append + flush per turn)")
    for config in configs:
        plural = "es" if config.processes > 1 else ""
        name = f"{config.backend}, {config.processes} API process{plural}"
        for agents, om in config.om.items():
            bare = config.bare[agents]
            section.add(
                f"{name}, {agents} agents: turns/s", om.turns_per_s, "turns/s",
                "bare FastAPI turns/s", bare.turns_per_s,
            )  # fmt: skip
            section.add(
                f"{name}, {agents} agents: context p50", om.p(0.5), "ms",
                "bare context p50", bare.p(0.5),
            )  # fmt: skip
            section.add(
                f"{name}, {agents} agents: context p99", om.p(0.99), "ms",
                "bare context p99", bare.p(0.99),
            )  # fmt: skip
            section.add(
                f"{name}, {agents} agents: context p99 after the first turn",
                om.later_p(0.99), "ms", "bare, the same", bare.later_p(0.99),
            )  # fmt: skip
    by_key = {(c.backend, c.processes): c for c in configs}
    for backend in ("SQLite", "PostgreSQL"):
        one, two = by_key.get((backend, 1)), by_key.get((backend, 2))
        if one is None or two is None:
            continue
        for agents in one.om:
            if agents in two.om:
                section.add(
                    f"{backend}, {agents} agents: turns/s with 2 API processes",
                    two.om[agents].turns_per_s, "turns/s",
                    "turns/s with 1 API process", one.om[agents].turns_per_s,
                )  # fmt: skip
    if limits is not None:
        reads = Settings().rate_limits
        section.add(
            "default limits: 64 agents' turns/s on one key", limits.agents.turns_per_s,
            "turns/s", "reads limit of one key", reads.reads_per_s,
        )  # fmt: skip
        section.add(
            "default limits: runaway loop's reads/s served on one key",
            limits.runaway.turns_per_s, "reads/s", "reads limit of one key", reads.reads_per_s,
        )  # fmt: skip
        section.notes.append(
            f"Default rate limits (SQLite, 2 API processes, one key, {seconds:g} s each): the "
            f"64 agents met {limits.agents.limited} 429s; a runaway loop (64 connections "
            f"reading one session's context back to back, honouring Retry-After) met "
            f"{limits.runaway.limited}."
        )
    section.notes.append(
        f"Each level runs {seconds:g} s: every agent loops GET context, POST 4 messages (user, "
        "assistant tool call, a 1 KB tool output, answer), POST flush on one of "
        f"{SESSIONS} sessions (agent n on session n mod {SESSIONS}); levels run in order on the "
        "same sessions, so later levels read longer sessions. One `om api` (or `--workers 2`), "
        "one `celery worker` (threads, 8 slots), private Redis, extractive provider, rate "
        "limits off, default memory settings. Every agent opens its connection with its first "
        "turn, all at once when a level starts: 'after the first turn' leaves those first "
        "reads out (for both apps), the load a level sustains; the plain p50 and p99 keep them. "
        "Baseline: `tests/bench/bare_api.py` under uvicorn with the same process count, same "
        "load, same run. The load generator (a hand-written keep-alive HTTP/1.1 client, "
        "asyncio, one process) shares the machine's cores with the API, the worker and Redis. "
        "PostgreSQL is ANALYZEd before each level, as autovacuum would."
    )
    return section


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short levels, no results file")
    parser.add_argument("--levels", type=int, nargs="*", default=list(LEVELS))
    parser.add_argument("--backends", nargs="*", default=["sqlite", "postgresql"])
    parser.add_argument("--processes", type=int, nargs="*", default=list(PROCESSES))
    parser.add_argument("--limits", action="store_true", help="also check the default limits")
    args = parser.parse_args()
    seconds = QUICK_LEVEL_S if args.quick else LEVEL_S
    configs = measure_all(args.backends, args.processes, args.levels, seconds)
    limits = None
    if args.limits:
        with tempfile.TemporaryDirectory() as folder:
            limits = measure_limits(Path(folder), seconds)
    section = report(configs, seconds, limits)
    print(section.markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
