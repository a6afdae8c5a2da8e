"""``python -m tests.chaos`` (``make chaos``): the full fault matrix on the compose topology as
local processes, on the Redis broker and then on RabbitMQ, then Redis restarted five times
under load (on the Redis leg) and the malformed-input probe on both stores; writes
``tests/chaos/results.md``.

``--only redis-restarts,malformed`` runs just those parts (either or both) and replaces their
sections of the existing results file, keeping the matrix's table and every other figure.

Needs PostgreSQL on 127.0.0.1:5432 (user ``postgres``); RabbitMQ (127.0.0.1:5672) for its leg.
Exit status 0 when every check of every fault and probe passed, 1 otherwise, 2 without
PostgreSQL.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from tests.chaos.faults import BY_SLUG, MATRIX, REDIS_RESTARTS_FAULT
from tests.chaos.malformed import BACKENDS, probe_backend
from tests.chaos.results import PARTS, RESULTS, Report, table, write
from tests.chaos.runner import run_leg
from tests.chaos.topology import FULL, SHORT, Broker
from tests.deploy.rehearsal import postgres_available

NOTES = (
    "Time to heal: from the fault's end (the kill, for a crash) to the first poll (every "
    "{poll_s} s) at which every message the API confirmed in the phase is cited by an observation. "
    "The load stops when the fault ends, so healing is the system's own (redelivery, lock "
    "expiry, the reconciler), never an agent's next flush.",
    "Provider faults pause the load: one agent run per session is made under the fault, so a "
    "session meets it about once (the reconciler backs a session off for 60 s, doubling, once "
    "its last three jobs failed).",
    "lost: confirmed messages not stored or never observed; duplicates: messages stored twice, "
    "cited by two observations, or an observation id recorded twice; overlaps: two runs of one "
    "session whose started..finished times intersect (a job the reconciler swept ends at the "
    "kill); stuck: jobs still queued/running after quiescence; leaks: the API keys, their "
    "secret parts, the provider key, the admin token or Flower's password in a log file, a "
    "response body, a database row (pg_dump) or a Redis key/value; 5xx: answers >= 500 outside "
    "the fault's window (+ grace), with those inside in brackets.",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--broker", choices=("redis", "amqp", "both"), default="both")
    parser.add_argument(
        "--faults", default="", help=f"comma-separated subset of: {', '.join(BY_SLUG)}"
    )
    parser.add_argument(
        "--only",
        default="",
        help=f"run only these parts ({', '.join(PARTS)}), comma-separated, and update their "
        "sections of the results file",
    )
    parser.add_argument("--short", action="store_true", help="short timings (as make test)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the report to write")
    parser.add_argument(
        "--keep-logs",
        type=Path,
        default=Path(os.environ["CHAOS_KEEP_LOGS"]) if os.environ.get("CHAOS_KEEP_LOGS") else None,
        help="copy the services' logs here (default: $CHAOS_KEEP_LOGS, else not kept)",
    )
    args = parser.parse_args(argv)
    if (reason := postgres_available()) is not None:
        print(f"chaos needs PostgreSQL: {reason}", file=sys.stderr)
        return 2
    only = tuple(part for part in args.only.split(",") if part)
    if unknown := [part for part in only if part not in PARTS]:
        parser.error(f"--only: unknown part(s) {', '.join(unknown)}; choose from {PARTS}")
    if only and args.faults:
        parser.error("--only and --faults do not go together")
    if only:
        faults = [REDIS_RESTARTS_FAULT] if REDIS_RESTARTS_FAULT.slug in only else []
        brokers: list[Broker] = ["redis"] if faults else []
        probe = "malformed" in only
    else:
        chosen = [BY_SLUG[s] for s in args.faults.split(",") if s]
        # A whole run adds the restarts after the matrix (Redis leg only) and the probe.
        faults = chosen or [*MATRIX, REDIS_RESTARTS_FAULT]
        brokers = ["redis", "amqp"] if args.broker == "both" else [args.broker]
        probe = not chosen
    profile = SHORT if args.short else FULL
    report = Report(
        profile, notes=[note.format(poll_s=profile.poll_s) for note in NOTES], only=only
    )
    began = time.monotonic()
    try:
        for broker in brokers:
            print(f"[{broker}] starting the topology")
            run_leg(report, broker, faults, keep_logs=args.keep_logs)
        if probe:
            print("malformed input: an API on each store")
            report.probes += [probe_backend(backend) for backend in BACKENDS]
    finally:
        report.seconds = time.monotonic() - began
        path = write(report, args.out)
    print(table(report.rows))
    for reason in report.skipped:
        print(f"skipped: {reason}")
    for failed in report.failed():
        print(f"failed: {failed}")
    print(f"written to {path} ({report.seconds / 60:.1f} min)")
    return 1 if report.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
