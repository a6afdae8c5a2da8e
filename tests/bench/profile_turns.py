"""Where one ``om api`` process spends its time under the agent-turns load (64 agents,
:mod:`tests.bench.bench_turns`): py-spy samples the API process (every thread) and this
prints the share of samples in which each of the serving path's parts is on the stack.

It also prints the CPU a turn of each process of the stack (the API, the worker, the database
server, Redis), read from ``/proc``: the machine's two cores are shared, and what the API does
not spend another process may.

``python -m tests.bench.profile_turns [--backend sqlite|postgresql] [--seconds 20] [--gil]``
(``--gil``: sample only the thread holding the GIL, the Python work); needs ``py-spy``
(``pip install py-spy``), run as root or with ptrace allowed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

from .bench_history import postgres_url
from .bench_turns import bare_server, drive, om_stack

PARTS: dict[str, tuple[str, ...]] = {
    # The async routes' coroutines and the functions they hand to the thread pool.
    "GET context (route)": ("context (om_api/server/routes/memory.py", "context_answer ("),
    "POST entries (route)": ("append_entries (om_api/server/routes/sessions.py", "_appended ("),
    "POST flush (route)": ("flush (om_api/server/routes/jobs.py", "_requested ("),
    "thread-pool hops": ("run_in_threadpool (",),
    "auth: API key lookup": ("resolve_api_key_id (",),
    "rate limits": ("check (om_api/server/limits.py",),
    "flush: fair queue + publish": ("FairPublisher", "fairness.py"),
    "flush: coalesce (Redis)": ("coalesce.py",),
    "flush: job rows (SQL)": ("create_job (", "get_job (", "widen_job_options (", "finish_job ("),
    "context: stored ledger + branch reads": ("read_context_state (", "read_tail ("),
    "context: rendering": ("build_context (",),
    "tombstones read": ("invalidated_ids (",),
    "session lookup": ("get_session (",),
    "SQL execute (all)": ("_execute_context (",),
    "new DB connections": ("__connect (sqlalchemy", "_create_connection ("),
    "SQLite writers' queue (waiting for it)": ("_SqliteWriters.held (",),
    "Redis round trips (all)": ("read_response (redis",),
    "pydantic validation/serialisation": ("validate_python", "serialize_response", "model_dump"),
    "middleware (request, metrics, log)": ("__call__ (om_api/server/app.py",),
    "idle (event loop select, thread waits)": ("select (selectors.py", "wait (threading.py"),
}


def profile(
    backend: str, seconds: float, agents: int, keep: str | None = None, *, gil: bool = False
) -> tuple[Counter[str], int]:
    """Samples of each part while ``agents`` agents load the API for ``seconds``; ``keep``:
    where to copy py-spy's raw stacks; ``gil``: sample only the thread holding the GIL."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        with postgres_url() if backend == "postgresql" else _sqlite(tmp) as url:
            if url is None:
                raise SystemExit("postgresql not reachable")
            with om_stack(tmp, url, 1) as stack:
                asyncio.run(drive(stack.url, stack.key, stack.sessions, agents, 3.0))  # warm-up
                raw = tmp / "profile.txt"
                only_gil = ["--gil"] if gil else []
                recorder = threading.Thread(
                    target=subprocess.run,
                    args=(
                        [spy, "record", "-p", str(stack.api_pid), "-d", str(int(seconds)),
                         "-r", "200", "-f", "raw", "-o", str(raw), "--nonblocking", *only_gil],
                    ),
                    kwargs={"capture_output": True, "check": True},
                )  # fmt: skip
                recorder.start()
                cpu_before = _cpu_s(stack.api_pid)
                others_before = _cpu_by_program()
                load = asyncio.run(drive(stack.url, stack.key, stack.sessions, agents, seconds))
                cpu_ms = (_cpu_s(stack.api_pid) - cpu_before) * 1000
                print(
                    f"API process: {cpu_ms / max(1, load.turns):.1f} ms CPU a turn "
                    f"({load.turns_per_s:.1f} turns/s, {cpu_ms / 1000 / load.seconds:.2f} cores)"
                )
                others = _cpu_by_program()
                for name in _PROGRAMS:
                    spent_ms = (others[name] - others_before[name]) * 1000
                    print(
                        f"{name}: {spent_ms / max(1, load.turns):.1f} ms CPU a turn "
                        f"({spent_ms / 1000 / load.seconds:.2f} cores)"
                    )
                recorder.join()
                with bare_server(tmp, 1) as (bare_url, bare_pid):
                    cpu_before = _cpu_s(bare_pid)
                    bare = asyncio.run(drive(bare_url, stack.key, stack.sessions, agents, seconds))
                    cpu_ms = (_cpu_s(bare_pid) - cpu_before) * 1000
                    print(
                        f"bare app: {cpu_ms / max(1, bare.turns):.1f} ms CPU a turn "
                        f"({bare.turns_per_s:.1f} turns/s, {cpu_ms / 1000 / bare.seconds:.2f} "
                        "cores)"
                    )
                if keep:
                    shutil.copy(raw, keep)
                return _parts(raw.read_text().splitlines())


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_PROGRAMS = {"worker": "celery", "database server": "postgres", "Redis": "redis-server"}


def _cpu_by_program() -> dict[str, float]:
    """CPU seconds used so far by every process whose command line names each program of
    :data:`_PROGRAMS` (processes of other stacks on the machine included)."""
    spent = dict.fromkeys(_PROGRAMS, 0.0)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cpu = _cpu_s(int(entry.name))
        except (OSError, IndexError, ValueError):  # the process ended meanwhile
            continue
        for name, program in _PROGRAMS.items():
            if program in command.split(" ", 1)[0] or f"-m {program}" in command:
                spent[name] += cpu
    return spent


class _sqlite:
    def __init__(self, tmp: Path) -> None:
        self.url = f"sqlite:///{tmp / 'profile.db'}"

    def __enter__(self) -> str:
        return self.url

    def __exit__(self, *_: object) -> None:
        return None


def _parts(lines: list[str]) -> tuple[Counter[str], int]:
    parts: Counter[str] = Counter()
    busy = 0
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        idle = any(m in stack for m in PARTS["idle (event loop select, thread waits)"])
        if not idle:
            busy += count
        for name, markers in PARTS.items():
            if any(m in stack for m in markers):
                parts[name] += count
    return parts, busy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="sqlite", choices=("sqlite", "postgresql"))
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--raw", help="also keep py-spy's raw stacks in this file")
    parser.add_argument("--gil", action="store_true", help="sample only the GIL's holder")
    parser.add_argument("--from-raw", help="summarise this raw file instead of measuring")
    args = parser.parse_args()
    if args.from_raw:
        with open(args.from_raw, encoding="utf-8") as raw:
            parts, busy = _parts(raw.read().splitlines())
    else:
        parts, busy = profile(args.backend, args.seconds, args.agents, args.raw, gil=args.gil)
    print(f"| part ({args.backend}, {args.agents} agents) | share of busy samples |")
    print("| --- | ---: |")
    for name, count in parts.most_common():
        if not name.startswith("idle"):
            print(f"| {name} | {100 * count / max(1, busy):.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
