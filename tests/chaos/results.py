"""The report: one table (fault, injected, healed, time to heal, lost, duplicates, overlaps,
stuck, leaks, 5xx) with the date, the machine and the settings, then notes per fault; and two
sections of their own: Redis restarted under load (worker deaths, lost runs) and the
malformed-input probe on both stores.

Each section sits between ``<!-- chaos:<part> -->`` markers with its own date, so a run of
only those parts (``python -m tests.chaos --only redis-restarts,malformed``) replaces them in
the existing file and keeps everything else as it was.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from tests.chaos.faults import BY_SLUG, REDIS_RESTARTS_FAULT
from tests.chaos.malformed import ProbeReport
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


PARTS: Final = (REDIS_RESTARTS_FAULT.slug, "malformed")
"""The parts reported in sections of their own, which ``--only`` can run alone."""
STORES: Final = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}


@dataclass
class Report:
    """Every leg's rows, the malformed-input probes, the legs skipped (with why), and how long
    it all took. ``only``: the parts of :data:`PARTS` this run was limited to (empty: a run of
    the matrix, which writes the whole file)."""

    profile: Profile
    rows: list[Row] = field(default_factory=list)
    probes: list[ProbeReport] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    seconds: float = 0.0
    only: tuple[str, ...] = ()

    def failed(self) -> list[str]:
        """What failed: a row's fault, or a store's probe."""
        found = [f"[{row.broker}] {row.fault.slug}" for row in self.rows if row.failures()]
        found += [f"malformed input on {p.backend}" for p in self.probes if p.failures()]
        return found

    def matrix_rows(self) -> list[Row]:
        """The rows of the matrix's table (not those of a section)."""
        return [row for row in self.rows if row.fault.slug in BY_SLUG]

    def restart_rows(self) -> list[Row]:
        return [row for row in self.rows if row.fault.slug == REDIS_RESTARTS_FAULT.slug]


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


def _provenance(report: Report, command: str) -> str:
    return (
        f"Run {report.started:%Y-%m-%d %H:%M} UTC on {machine()}; "
        f"{report.seconds / 60:.1f} min in all (`{command}`, profile `{report.profile.name}`)."
    )


def render(report: Report) -> str:
    """The whole report as markdown."""
    profile = report.profile
    settings = ", ".join(f"{k}={v}" for k, v in profile.settings.items()) or "(none)"
    out = [
        "# Chaos matrix results",
        "",
        _provenance(report, "make chaos"),
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
        table(report.matrix_rows()),
        "",
    ]
    if report.skipped:
        out += ["Skipped:", "", *[f"- {reason}" for reason in report.skipped], ""]
    for section in sections(report).values():
        out += [section, ""]
    out += ["## Notes", ""]
    out += [f"- {note}" for note in report.notes]
    for row in report.matrix_rows():
        out += ["", f"**[{row.broker}] {row.fault.title}**", ""]
        if row.fault.target_text:
            out.append(f"- target: {row.fault.target_text}")
        out += [f"- {note}" for note in row.notes]
    return "\n".join(out) + "\n"


def sections(report: Report) -> dict[str, str]:
    """The sections of :data:`PARTS` this report has results for, by part, markers included."""
    command = "python -m tests.chaos" + (f" --only {','.join(report.only)}" if report.only else "")
    found: dict[str, str] = {}
    if rows := report.restart_rows():
        found[REDIS_RESTARTS_FAULT.slug] = _restarts_section(report, rows, command)
    if report.probes:
        found["malformed"] = _malformed_section(report, command)
    return {part: _marked(part, text) for part, text in found.items()}


def _marked(part: str, text: str) -> str:
    return f"<!-- chaos:{part} -->\n{text}\n<!-- /chaos:{part} -->"


def worker_deaths(row: Row) -> int:
    """Worker processes that exited on their own during the row's fault."""
    return sum(1 for crash in row.crashes if crash.name.startswith("worker"))


def lost_runs(row: Row) -> int:
    """Flush jobs the API accepted that never finished (still queued or running after
    quiescence): the work a lost run would have done is only done if the reconciler finds it."""
    return len(row.verdict.stuck)


def _restarts_section(report: Report, rows: Sequence[Row], command: str) -> str:
    out = ["## Redis restarted under load", "", _provenance(report, command), ""]
    profile = report.profile
    out.append(
        f"The matrix's topology on the Redis broker ({profile.workers} workers x "
        f"{profile.concurrency} slots; lock TTL {profile.lock_ttl_s:.0f} s, reconcile interval "
        f"{profile.reconcile_interval_s:.0f} s) under its load (2 tenants x "
        f"{profile.sessions_per_tenant} fresh sessions, {profile.threads} threads of agent "
        "runs); Redis (no persistence) is stopped and started empty on its port each time a "
        "flush that started after the previous restart is running (its job row says so). "
        "Worker deaths: worker processes that exited on their own (the harness restarts them, "
        "as compose would); lost runs: flush jobs the API accepted that never finished."
    )
    out.append("")
    for row in rows:
        flights = row.injected.in_flight
        busy = sum(1 for n in flights if n > 0)
        tasks = (
            "with tasks in flight"
            if busy == len(flights)
            else f"with tasks in flight at {busy} of them"
        )
        out.append(
            f"**Redis restarted under load {len(flights)} times {tasks}: "
            f"{worker_deaths(row)} worker deaths, {lost_runs(row)} lost runs** "
            f"({', '.join(str(n) for n in flights)} flushes running at the restarts; "
            f"{len(row.verdict.lost)} confirmed messages lost)."
        )
        out.append("")
    out += [table(rows), ""]
    for row in rows:
        out += [f"- {note}" for note in row.notes]
    return "\n".join(out)


def _malformed_section(report: Report, command: str) -> str:
    probes = report.probes
    five_xx = sum(len(p.five_xx) for p in probes)
    stores = " and ".join(STORES[p.backend] for p in probes)
    both = {p.backend for p in probes} == set(STORES)
    verdict = (
        f"**Zero 5xx for NUL, surrogates and every other malformed input on "
        f"{'both stores' if both else stores}**"
        if five_xx == 0
        else f"**{five_xx} 5xx for malformed input** ({stores})"
    )
    counts = ", ".join(f"{p.probes} probes on {STORES[p.backend]}" for p in probes)
    failed = any(p.failures() for p in probes)
    out = [
        "## Malformed input",
        "",
        _provenance(report, command),
        "",
        f"{verdict}: {counts}; "
        + (
            "failures below." if failed else "every answer a 4xx, nothing stored, no secret logged."
        ),
        "",
        "An `om api` process per store (a fresh PostgreSQL database, a SQLite file; a private "
        "Redis; rate limits off, so every probe reaches validation), probed with NUL and lone "
        "surrogates in every kind of field (message content and parts, tool names, ids and "
        "arguments, custom data keys and values, notes, entry, parent and session ids, session "
        "metadata keys and values, scope labels, tenant names, key labels, a key of the body), "
        "the same as raw bytes and invalid UTF-8, NaN, Infinity and 1e400, JSON one level past "
        "the depth limit and 100,000 levels deep, unknown keys at every level of the nested "
        "models, wrong types and shapes, bodies that are not JSON, and ids and query "
        "parameters holding NUL or surrogates (`tests/chaos/malformed.py`). Stored: entries "
        "of the probes' session afterwards.",
        "",
        "| store | probes | answers | 5xx | no answer | 2xx (accepted) | stored "
        "| secrets in the log |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in probes:
        answers = ", ".join(f"{status} x{n}" for status, n in sorted(p.statuses.items()))
        cells = (
            STORES[p.backend],
            str(p.probes),
            answers,
            _count(len(p.five_xx)),
            _count(len(p.no_answer)),
            _count(len(p.accepted)),
            _count(p.stored),
            _count(len(p.leaks)),
        )
        out.append("| " + " | ".join(cells) + " |")
    kinds = probes[0].by_kind
    out += ["", "Probes by kind: " + ", ".join(f"{kind} {n}" for kind, n in kinds.items()) + "."]
    for p in probes:
        out += [f"- {STORES[p.backend]}: {failure}" for failure in p.failures()[:10]]
    return "\n".join(out)


_SECTION = re.compile(r"<!-- chaos:(?P<part>[\w-]+) -->\n.*?\n<!-- /chaos:(?P=part) -->", re.S)


def merge(existing: str, new_sections: dict[str, str]) -> str:
    """``existing`` (a report) with each of ``new_sections`` in place of the same part's
    section, or, for a part it does not have yet, inserted before its notes (at the end when
    it has none). Everything else is kept as it was."""
    text = existing
    for part, section in new_sections.items():
        found = {m.group("part"): m for m in _SECTION.finditer(text)}
        if part in found:
            match = found[part]
            text = text[: match.start()] + section + text[match.end() :]
        elif "\n## Notes\n" in text:
            at = text.index("\n## Notes\n") + 1
            text = text[:at] + section + "\n\n" + text[at:]
        else:
            text = text.rstrip("\n") + "\n\n" + section + "\n"
    return text


def write(report: Report, path: Path = RESULTS) -> Path:
    """Write the report: the whole file, or, for a run limited to some of :data:`PARTS`
    (``report.only``), their sections merged into the file that is there."""
    if report.only and path.exists():
        text = merge(path.read_text(encoding="utf-8"), sections(report))
    else:
        text = render(report)
    path.write_text(text, encoding="utf-8")
    return path
