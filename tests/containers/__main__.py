"""``make test-containers``: the deployment in ``deploy/`` built and run for real, with podman.

From nothing: installs podman, podman-compose, runc and debootstrap when missing and enables
IPv4 forwarding (:mod:`tests.containers.host`); builds the Debian base and the stand-in images
unless a previous run left them, then the service image from ``deploy/Dockerfile``
(:mod:`tests.containers.images`); runs the suite, whose session starts the compose topology
(API, two workers, beat, Flower, Redis, PostgreSQL) and tears it down
(:mod:`tests.containers.stack`); writes ``tests/containers/results.md``. Exit status: the
suite's.

    python -m tests.containers            # everything
    python -m tests.containers --keep     # leave the topology running afterwards
    python -m tests.containers --down     # remove what --keep left (this project's only)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from tests.containers import host, images
from tests.containers.conftest import FIGURES_VAR, KEEP_VAR
from tests.containers.redis_server import IMAGE_VAR
from tests.containers.results import RESULTS, render
from tests.containers.stack import ComposeStack

SUITE: Final = ("test_redis_server.py", "test_service.py", "test_faults.py", "test_scaling.py")
"""In this order: the probes on a fresh topology, then the faults, then the scaling."""
REDIS_IMAGE: Final = next(s.name for s in images.STAND_INS if s.name.startswith("redis:"))
E2E_ON_A_REDIS_CONTAINER: Final = "tests/e2e/test_recovery_and_flower.py"
"""Existing end-to-end tests run again with their private Redis in a container (a Redis
restart mid-load among them)."""


def say(line: str) -> None:
    print(f"[containers] {line}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.containers")
    parser.add_argument("--keep", action="store_true", help="leave the topology running")
    parser.add_argument("--down", action="store_true", help="remove a kept topology and exit")
    args = parser.parse_args(argv)
    if args.down:
        with tempfile.TemporaryDirectory() as folder:
            ComposeStack(Path(folder)).teardown(quiet=True)
        return 0
    began = time.monotonic()
    phases, built = build()
    before = podman_objects()
    suite, figures = run_suite(phases, keep=args.keep)
    e2e = run_e2e_on_a_redis_container(phases)
    figures["e2e_redis_container"] = {"file": E2E_ON_A_REDIS_CONTAINER, "passed": e2e == 0}
    left = sorted(podman_objects() - before) if not args.keep else []
    if left:
        say(f"FAILED to clean up after itself: {', '.join(left)}")
    code = suite or e2e or (1 if left else 0)
    total = time.monotonic() - began
    RESULTS.write_text(render(figures, phases, total, built, passed=code == 0))
    say(f"{'passed' if code == 0 else 'FAILED'} in {total / 60:.1f} min; {RESULTS}")
    logs = figures.get("logs")
    if logs and suite == 0 and not args.keep:
        shutil.rmtree(logs, ignore_errors=True)
    elif logs:
        say(f"container logs: {logs}")
    return code


def podman_objects() -> set[str]:
    """Every container, volume and network on the host, as ``kind id``."""
    listings = {
        "container": ("ps", "-a", "-q", "--no-trunc"),
        "volume": ("volume", "ls", "-q"),
        "network": ("network", "ls", "-q", "--no-trunc"),
    }
    return {
        f"{kind} {item}" for kind, argv in listings.items() for item in host.podman(*argv).split()
    }


def build() -> tuple[dict[str, float], list[str]]:
    """The host and every image; returns the seconds of each phase and the base images built
    (none when an earlier run left them)."""
    phases: dict[str, float] = {}
    mark = time.monotonic()
    host.prepare(say)
    phases["host"] = time.monotonic() - mark
    mark = time.monotonic()
    built = ["base"] if images.ensure_base(say) else []
    built += images.ensure_stand_ins(say)
    phases["base images"] = time.monotonic() - mark
    if not built:
        say("base and stand-in images: reused")
    phases["service image"] = images.build_service(say)
    return phases, built


def run_suite(phases: dict[str, float], *, keep: bool) -> tuple[int, dict[str, Any]]:
    """The container suite in its own pytest; returns its exit status and its figures."""
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="om-containers-figures-") as folder:
        path = Path(folder) / "figures.json"
        env = {**os.environ, FIGURES_VAR: str(path), KEEP_VAR: "1" if keep else "0"}
        say("running the suite against the compose topology")
        mark = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--durations=0",
             *(str(here / name) for name in SUITE)],
            env=env,
            cwd=images.ROOT,
            check=False,
        )  # fmt: skip
        phases["suite"] = time.monotonic() - mark
        figures: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    return done.returncode, figures


def run_e2e_on_a_redis_container(phases: dict[str, float]) -> int:
    """:data:`E2E_ON_A_REDIS_CONTAINER` with ``OM_TEST_REDIS_IMAGE``; returns its exit status."""
    say(f"{E2E_ON_A_REDIS_CONTAINER} with {IMAGE_VAR}={REDIS_IMAGE}")
    mark = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", E2E_ON_A_REDIS_CONTAINER],
        env={**os.environ, IMAGE_VAR: REDIS_IMAGE},
        cwd=images.ROOT,
        check=False,
    )
    phases["e2e on a Redis container"] = time.monotonic() - mark
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
