"""Where one ``celery worker`` process spends its time on flush jobs under Figure 1's load
(:mod:`tests.bench.bench_workers`: one worker, 16 threads, zero-latency provider, SQLite):
py-spy samples the worker (every thread) while it runs the flushes and this prints the share
of busy samples in which each part of a flush job is on the stack, the worker's CPU time a
flush, and the Redis commands the whole run sent a flush (enqueue side included).

``python -m tests.bench.profile_flush [--flushes 600] [--fair|--no-fair] [--raw FILE]``;
needs ``py-spy`` (``pip install py-spy``), run as root or with ptrace allowed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from sqlalchemy import create_engine

from om_workers.celery.app import enqueue_flush
from om_workers.celery.config import create_celery_app
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import AccountStore, SqlStore, upgrade
from tests.e2e.support import add_chat
from tests.e2e.workers import Worker

from .bench_workers import CONCURRENCY, LIMITS, _wait_for_runs, bench_worker_env
from .profile_turns import _cpu_s

PARTS: dict[str, tuple[str, ...]] = {
    "flush task (all)": ("flush_task (om_workers/celery/tasks.py",),
    "fair queue: start": ("started (om_workers/coordination/fairness.py",),
    "fair queue: done + admit": ("finished (om_workers/coordination/fairness.py",),
    "publish of admitted jobs (send_task)": ("send_task (celery",),
    "lock acquire": ("acquire (om_workers/coordination/locks.py",),
    "lock release": ("release (om_workers/coordination/locks.py",),
    "job start (SQL)": ("start_job (om_workers/store",),
    "pipeline (runtime.flush)": ("flush (om_core/flush/runtime.py",),
    "observer (extractive)": ("generate (om_core/flush/extractive.py",),
    "finish (records + job row, SQL)": ("finish (om_workers/jobs/running.py",),
    "webhook announce (SQL)": ("announce (om_workers/celery/webhooks.py",),
    # SQLAlchemy's execution path, or on SQLite the driver's (om_workers/store/driver.py).
    "SQL execute (all)": ("_execute_context (", "_run (om_workers/store/driver.py"),
    "SQLite writers' queue": ("held (om_workers/store/engine.py",),
    "SQL commit": ("commit (sqlalchemy/engine/base.py",),
    "Redis round trips (all)": ("read_response (redis",),
    "JSON": ("dumps (json", "loads (json", "orjson"),
    "logging": ("handle (logging", "callHandlers (logging"),
    "Celery task tracing (outside the task)": ("trace_task (celery",),
    "Celery consumer / event loop": ("asynloop (", "on_readable (kombu", "_brpop_read ("),
    "idle (thread waits, select)": ("wait (threading.py", "select (selectors.py", "poll ("),
}


def profile(flushes: int, fair: bool, raw_copy: str | None, gil: bool = False) -> None:
    """Run ``flushes`` flushes of distinct one-turn sessions through one worker under py-spy
    and print the parts, CPU a flush and Redis commands a flush."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        url = f"sqlite:///{tmp / 'profile.db'}"
        upgrade(url)
        store = SqlStore.from_url(url)
        tenant = AccountStore(store.engine).create_tenant("bench").id
        sessions = [f"p{i:05d}" for i in range(flushes)]
        for session in sessions:
            store.create_session(tenant, session)
            add_chat(store, tenant, session, 1)
        with EmbeddedRedis() as redis_server:
            client = connect(redis_server.url)
            app = create_celery_app(broker_url=redis_server.url, limits=LIMITS, concurrency=1)
            env = bench_worker_env(redis_server.url, url, delay_s=0.0, slots=CONCURRENCY, fair=fair)
            worker = Worker("profile", env, tmp / "profile.log")
            try:
                worker.wait_ready()
                raw = tmp / "flush.txt"
                recorder = subprocess.Popen(
                    [spy, "record", "-p", str(worker.process.pid), "-r", "200", "-f", "raw",
                     "-o", str(raw), "--nonblocking", *(["--gil"] if gil else [])],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                time.sleep(1.0)  # py-spy attaches
                client.config_resetstat()
                cpu_before = _cpu_s(worker.process.pid)
                started = time.perf_counter()
                for session in sessions:
                    enqueue_flush(store, client, tenant, session, app=app, fair=fair)
                engine = create_engine(url)
                _wait_for_runs(engine, flushes, started)
                elapsed = time.perf_counter() - started
                cpu_ms = (_cpu_s(worker.process.pid) - cpu_before) * 1000
                stats = client.info("commandstats")
                engine.dispose()
                recorder.send_signal(2)
                recorder.wait(timeout=60)
                if raw_copy:
                    shutil.copy(raw, raw_copy)
                parts, busy = _parts(raw.read_text().splitlines())
            finally:
                worker.stop()
                client.close()
        store.close()
    print(
        f"{flushes} flushes in {elapsed:.2f} s ({flushes / elapsed:.1f} /s), fair={fair}: "
        f"worker CPU {cpu_ms / flushes:.2f} ms a flush"
    )
    print("| part | share of busy samples |")
    print("| --- | ---: |")
    for name, count in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"| {name} | {100 * count / max(1, busy):.1f} % |")
    print("\n| Redis command | calls a flush |")
    print("| --- | ---: |")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    for name, count in sorted(calls.items(), key=lambda item: -item[1]):
        if count >= flushes / 10:
            print(f"| {name} | {count / flushes:.2f} |")
    print(f"| (all) | {sum(calls.values()) / flushes:.2f} |")


def _parts(lines: list[str]) -> tuple[Counter[str], int]:
    parts: Counter[str] = Counter()
    busy = 0
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        # py-spy's raw format lists the innermost frame last: a sample is idle when the
        # thread waits there.
        innermost = stack.rsplit(";", 1)[-1]
        if any(m in innermost for m in PARTS["idle (thread waits, select)"]):
            continue
        busy += count
        for name, markers in PARTS.items():
            if any(m in stack for m in markers):
                parts[name] += count
    return parts, busy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flushes", type=int, default=600)
    parser.add_argument("--fair", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--raw", help="also keep py-spy's raw stacks in this file")
    parser.add_argument(
        "--gil",
        action="store_true",
        help="sample only the thread holding the GIL: where the worker's CPU goes, without "
        "the GIL waits of its other threads",
    )
    args = parser.parse_args()
    profile(args.flushes, args.fair, args.raw, args.gil)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["PARTS", "profile"]
