"""20. Tracing overhead: the serving benchmark's turns with OpenTelemetry on against off.

The load of :mod:`tests.bench.bench_turns` (agents looping GET context, POST entries, POST
flush) through one ``om api`` process and one ``celery worker`` on SQLite: with tracing off,
with every request traced, and with one request in ten sampled; traced runs export over
OTLP/HTTP to a local receiver (:mod:`tests.e2e.otlp_receiver` in a process of its own,
decoding every export as a collector would). The modes take turns, three runs each, in the
same run; the figures are the best run of each mode (the noise of a shared machine only ever
slows a run down).

``python -m tests.bench.bench_tracing --quick`` runs shorter and prints without writing.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Final

from tests.e2e.otlp_receiver import OtlpReceiver
from tests.threads import serving

from .bench_turns import Load, drive, om_stack
from .common import Section

AGENTS: Final = 64
ROUNDS: Final = 3
LEVEL_S: Final = 12.0
QUICK_LEVEL_S: Final = 4.0


def _serve_receiver(conn: Connection) -> None:
    receiver = OtlpReceiver()
    conn.send(receiver.url)
    with serving(receiver.httpd):
        conn.recv()  # until the benchmark is done
    conn.send(len(receiver.spans))


@contextmanager
def receiver_process() -> Iterator[tuple[str, list[int]]]:
    """An OTLP receiver in a process of its own (decoding exports must not take the load
    generator's core time): its URL, and after the block the number of spans it received."""
    ours, theirs = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(target=_serve_receiver, args=(theirs,))
    process.start()
    received: list[int] = []
    try:
        yield str(ours.recv()), received
    finally:
        ours.send("stop")
        received.append(int(ours.recv()))
        process.join(30)


def _measure(tmp: Path, seconds: float, env: dict[str, str]) -> Load:
    database_url = f"sqlite:///{tmp / f'tracing-{len(list(tmp.iterdir()))}.db'}"
    with om_stack(tmp, database_url, 1, **env) as stack:
        # One short warm-up level: the first requests of a process pay for imports and caches.
        asyncio.run(drive(stack.url, stack.key, stack.sessions, AGENTS, 1.0))
        return asyncio.run(drive(stack.url, stack.key, stack.sessions, AGENTS, seconds))


MODES: Final = ("off", "every request", "1 in 10 sampled")


def measure(seconds: float) -> tuple[dict[str, Load], int]:
    """The best run of each of :data:`MODES`, and the spans received."""
    runs: dict[str, list[Load]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as folder, receiver_process() as (url, received):
        tmp = Path(folder)
        exporting = {"OTEL_EXPORTER_OTLP_ENDPOINT": url}
        envs = {
            "off": {},
            "every request": {**exporting, "OTEL_TRACES_SAMPLER": "always_on"},
            "1 in 10 sampled": {
                **exporting,
                "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                "OTEL_TRACES_SAMPLER_ARG": "0.1",
            },
        }
        for round_ in range(ROUNDS):
            for mode in MODES:
                load = _measure(tmp, seconds, envs[mode])
                runs[mode].append(load)
                print(
                    f"  round {round_ + 1}, tracing {mode}: {load.turns_per_s:,.1f} turns/s, "
                    f"context p99 {load.p(0.99):,.1f} ms",
                    flush=True,
                )
    best = {mode: max(loads, key=lambda load: load.turns_per_s) for mode, loads in runs.items()}
    return best, received[0]


def report(best: dict[str, Load], spans: int, seconds: float) -> Section:
    section = Section("20. Tracing overhead (OpenTelemetry on against off, serving path)")
    off = best["off"]
    for mode in MODES[1:]:
        on = best[mode]
        section.add(
            f"{AGENTS} agents: turns/s, tracing {mode}", on.turns_per_s, "turns/s",
            "tracing off", off.turns_per_s,
        )  # fmt: skip
        section.add(
            f"{AGENTS} agents: context p99, tracing {mode}", on.p(0.99), "ms",
            "tracing off", off.p(0.99),
        )  # fmt: skip
    section.notes.append(
        f"SQLite, one `om api`, one `celery worker` (threads, 8 slots), extractive provider, "
        f"{AGENTS} agents for {seconds:g} s per run, {ROUNDS} runs per mode in turn, best run "
        f"of each mode. On: `OTEL_EXPORTER_OTLP_ENDPOINT` at a local OTLP/HTTP receiver (its "
        f"own process) decoding every export; every request: `OTEL_TRACES_SAMPLER=always_on`; "
        f"1 in 10: `parentbased_traceidratio` at 0.1 (a job follows its request's decision). "
        f"{spans:,} spans received in all. Goal: turns/s traced at least 0.9 of off."
    )
    return section


def run() -> Section:
    best, spans = measure(LEVEL_S)
    return report(best, spans, LEVEL_S)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs, no results file")
    seconds = QUICK_LEVEL_S if parser.parse_args().quick else LEVEL_S
    best, spans = measure(seconds)
    print(report(best, spans, seconds).markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
