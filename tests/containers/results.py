"""``tests/containers/results.md``: what the last ``make test-containers`` run measured."""

from __future__ import annotations

import platform
import re
import subprocess
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from tests.containers.host import HERE, run
from tests.containers.images import BASE_IMAGE, SERVICE_IMAGE, STAND_INS, image_size_mb

RESULTS: Final = HERE / "results.md"


def _output(argv: Sequence[str]) -> str:
    try:
        done = run(argv, check=False, timeout_s=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (done.stdout + done.stderr).strip()


def _version(argv: Sequence[str]) -> str:
    lines = _output(argv).splitlines()
    return lines[-1] if lines else "?"


def _compose_version() -> str:
    """``podman-compose 1.0.3`` (its --version prints podman's too, and an exit code)."""
    found = re.search(r"podman-composer? version\s+(\S+)", _output(["podman-compose", "--version"]))
    return f"podman-compose {found.group(1) if found else '?'}"


def _size(name: str) -> str:
    try:
        return f"{image_size_mb(name):.0f} MB"
    except Exception:  # an image a failed run did not build
        return "-"


def render(
    figures: Mapping[str, Any],
    phases: Mapping[str, float],
    total_s: float,
    built: Sequence[str],
    *,
    passed: bool,
) -> str:
    """The results page for one run."""
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Container suite results",
        "",
        f"Run {now} on {platform.node()}; {platform.platform()}; "
        f"{_version(['podman', '--version'])}; {_compose_version()}; `make test-containers` "
        f"{'passed' if passed else 'FAILED'} in **{total_s / 60:.1f} min** "
        f"(base images {'built: ' + ', '.join(built) if built else 'reused from an earlier run'}).",
        "",
        "| phase | seconds |",
        "| --- | ---: |",
        *(f"| {name} | {seconds:.0f} |" for name, seconds in phases.items()),
        *(
            f"| suite: {name} | {seconds:.0f} |"
            for name, seconds in figures.get("stack", {}).items()
        ),
        "",
        *_images(figures),
        *_faults(figures),
        *_scaling(figures),
    ]
    e2e = figures.get("e2e_redis_container")
    if e2e:
        outcome = "passed" if e2e["passed"] else "FAILED"
        lines += [
            "",
            f"Existing end-to-end tests with their private Redis in a container "
            f"(`OM_TEST_REDIS_IMAGE=redis:7.2-alpine`): `{e2e['file']}` {outcome}.",
        ]
    if figures.get("tour"):
        tour = figures["tour"]
        lines += ["", f"Client tour (`examples/client_tour.py`) through the API: `{tour}`"]
    return "\n".join(lines) + "\n"


def _images(figures: Mapping[str, Any]) -> list[str]:
    image = figures.get("image", {})
    lines = [
        "## Images",
        "",
        f"The service image `{SERVICE_IMAGE}`: **{_size(SERVICE_IMAGE)}**, runs as "
        f"`{image.get('user', '?')}` (user `om`, not root) on a read-only root file system "
        "with a writable `/tmp`, as every om container of the topology showed (`id -u`, "
        "`podman top`, a refused write). Built on the local stand-in for "
        "`python:3.11-slim-bookworm` (Debian's Python 3.11), so its size is that base's plus "
        "the service's virtual environment and tini.",
        "",
        "| image | size | what |",
        "| --- | ---: | --- |",
        f"| `{BASE_IMAGE}` | {_size(BASE_IMAGE)} | debootstrap minbase bookworm, trimmed |",
    ]
    lines += [
        f"| `{s.name}` | {_size(s.reference)} | stand-in from `{s.containerfile}` |"
        for s in STAND_INS
    ]
    return [*lines, ""]


def _faults(figures: Mapping[str, Any]) -> list[str]:
    rows = [(key, figures[key]) for key in ("worker_kill", "redis_restart") if key in figures]
    if not rows:
        return []
    lines = [
        "## Faults",
        "",
        "The local fault matrix's mixed load (2 tenants x 3 fresh sessions, 3 threads of agent "
        "runs: append a turn, flush, context, recall) through the published API port; its checks "
        "after quiescence (`tests/chaos/checks.py`), secrets searched in every container's log, "
        "the database (`pg_dump` in its container) and Redis. Time to heal: from the kill (or "
        "Redis answering again) until every confirmed message is observed. Settings: "
        f"{figures.get('tuning', '')}.",
        "",
        "| fault | time to heal | messages confirmed | jobs | problems | API during the fault |",
        "| --- | ---: | ---: | --- | --- | --- |",
    ]
    for _, row in rows:
        jobs = ", ".join(f"{n} {state}" for state, n in sorted(row["jobs"].items()))
        problems = ", ".join(f"{k}: {n}" for k, n in row["problems"].items()) or "none"
        window = ", ".join(f"{k} x{n}" for k, n in row["in_window"].items()) or "-"
        heal = "not healed" if row["heal_s"] is None else f"{row['heal_s']} s"
        if "target_s" in row:
            met = "met" if row["target_met"] else "missed"
            heal += f" (target <= {row['target_s']:g} s: {met})"
        lines.append(
            f"| {row['fault']} | {heal} | {row['messages']} | {jobs} | {problems} | {window} |"
        )
    return [*lines, ""]


def _scaling(figures: Mapping[str, Any]) -> list[str]:
    scaling = figures.get("scaling")
    if not scaling:
        return []
    slots, delay = scaling["slots_per_worker"], scaling["provider_delay_s"]
    lines = [
        "## Scaling the workers",
        "",
        f"A backlog of flushes (one turn on each of {scaling['one']['flushes']} fresh sessions, "
        "then a flush requested for each) drained by one and by three worker containers of "
        f"{slots} slots; every flush makes one provider call of {delay:g} s.",
        "",
        "| worker containers | flushes | seconds | flushes/s | ceiling (workers x slots / delay) |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for key in ("one", "three"):
        row = scaling[key]
        ceiling = row["workers"] * slots / delay
        lines.append(
            f"| {row['workers']} | {row['flushes']} | {row['seconds']} | {row['per_s']} "
            f"| {ceiling:g} |"
        )
    return [*lines, ""]
