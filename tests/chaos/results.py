"""The report: one table (fault, injected, healed, time to heal, lost, duplicates, overlaps,
stuck, leaks, 5xx) with the date, the machine and the settings, then notes per fault."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from tests.chaos.matrix import Row
from tests.chaos.topology import Profile

RESULTS: Final = Path(__file__).with_name("results.md")
HEADER: Final = (
    "fault",
    "injected",
    "healed",
    "time to heal",
    "lost",
    "duplicates",
    "overlaps",
    "stuck",
    "leaks",
    "5xx",
)


@dataclass
class Report:
    """Every leg's rows, the legs skipped (with why), and how long it all took."""

    profile: Profile
    rows: list[Row] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    seconds: float = 0.0

    def failed(self) -> list[Row]:
        return [row for row in self.rows if row.failures()]


def table(rows: Sequence[Row]) -> str:
    """The markdown table of ``rows``."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for row in rows:
        cells = (
            f"[{row.broker}] {row.fault.title}",
            row.injected.description,
            "yes" if row.healed else "**no**",
            _heal(row),
            _count(len(row.verdict.lost)),
            _count(len(row.verdict.duplicates)),
            _count(len(row.verdict.overlaps)),
            _count(len(row.verdict.stuck)),
            _count(len(row.leaks)),
            _five_xx(row),
        )
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    return "\n".join(lines)


def _count(n: int) -> str:
    return str(n) if n == 0 else f"**{n}**"


def _heal(row: Row) -> str:
    if row.heal_s is None:
        return "not within the timeout"
    text = f"{row.heal_s:.1f} s"
    if row.target_s is not None:
        verdict = "met" if row.met_target else "**missed**"
        text += f" (target <= {row.target_s:.0f} s: {verdict})"
    return text


def _five_xx(row: Row) -> str:
    outside = _count(len(row.five_xx))
    inside = sum(n for label, n in row.in_window.items() if label[:1] == "5")
    return f"{outside} (in the fault: {inside})" if inside else outside


def machine() -> str:
    """Host, OS, CPUs, memory, Python and the servers' versions."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    parts = [
        platform.node(),
        platform.platform(),
        f"{os.cpu_count()} CPUs",
        f"{memory:.0f} GiB",
        f"Python {sys.version.split()[0]}",
    ]
    for argv in (["postgres", "--version"], ["redis-server", "--version"]):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            words = done.stdout.replace("v=", "").split()
            parts.append(" ".join(words[:3]))
        except OSError:
            continue
    return "; ".join(part for part in parts if part)


def render(report: Report) -> str:
    """The whole report as markdown."""
    profile = report.profile
    settings = ", ".join(f"{k}={v}" for k, v in profile.settings.items()) or "(none)"
    out = [
        "# Chaos matrix results",
        "",
        f"Run {report.started:%Y-%m-%d %H:%M} UTC on {machine()}; "
        f"{report.seconds / 60:.1f} min in all (`make chaos`, profile `{profile.name}`).",
        "",
        f"Topology: PostgreSQL (fresh database) through a fault proxy, private Redis through a "
        f"proxy, migrate, API, {profile.workers} workers x {profile.concurrency} slots, beat, "
        f"Flower; the workers' provider is a local OpenAI-compatible server switched at run time "
        f"(`OM_PROVIDER=openai`, {profile.provider_delay_s} s a call). Settings on top of the "
        f"compose environment: {settings}; memory settings observe every message and never "
        f"reflect (exact counting); lock TTL {profile.lock_ttl_s:.0f} s, reconcile interval "
        f"{profile.reconcile_interval_s:.0f} s. Load: 2 tenants x {profile.sessions_per_tenant} "
        f"fresh sessions per fault, {profile.threads} threads of agent runs (append a turn, "
        f"flush, context, recall); outages last {profile.outage_s:.0f} s.",
        "",
        table(report.rows),
        "",
    ]
    if report.skipped:
        out += ["Skipped:", "", *[f"- {reason}" for reason in report.skipped], ""]
    out += ["## Notes", ""]
    out += [f"- {note}" for note in report.notes]
    for row in report.rows:
        out += ["", f"**[{row.broker}] {row.fault.title}**", ""]
        if row.fault.target_text:
            out.append(f"- target: {row.fault.target_text}")
        out += [f"- {note}" for note in row.notes]
    return "\n".join(out) + "\n"


def write(report: Report, path: Path = RESULTS) -> Path:
    path.write_text(render(report), encoding="utf-8")
    return path
