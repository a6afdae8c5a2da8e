"""What every benchmark shares: timing, the machine's description, and the results file.

Each benchmark measures its figure and a baseline in the same run, so a noisy machine moves
both; the results file keeps the figure, the baseline and their ratio.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "results.md"
RESULTS_PNG = HERE / "results.png"


@dataclass
class Row:
    """One figure against its baseline; ``ratio`` is figure / baseline."""

    name: str
    value: float
    unit: str
    baseline_name: str
    baseline: float

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("nan")


@dataclass
class Section:
    """One benchmark's table, with notes on how it was measured."""

    title: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, name: str, value: float, unit: str, baseline_name: str, baseline: float) -> None:
        self.rows.append(Row(name, value, unit, baseline_name, baseline))
        print(
            f"  {name}: {value:,.3f} {unit}  vs {baseline_name}: {baseline:,.3f} {unit}  "
            f"(ratio {self.rows[-1].ratio:,.3f})",
            flush=True,
        )

    def markdown(self) -> str:
        lines = [
            f"## {self.title}",
            "",
            "| figure | value | baseline | baseline value | ratio |",
            "| --- | ---: | --- | ---: | ---: |",
        ]
        for r in self.rows:
            lines.append(
                f"| {r.name} | {r.value:,.3f} {r.unit} | {r.baseline_name} | "
                f"{r.baseline:,.3f} {r.unit} | {r.ratio:,.3f} |"
            )
        lines += ["", *self.notes, ""] if self.notes else [""]
        return "\n".join(lines)


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    """Seconds of the fastest of ``repeat`` calls (the least disturbed by other load)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def median_of(fn: Callable[[], object], repeat: int = 9) -> float:
    """Median seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


def _version(command: list[str]) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else "?"


def machine() -> str:
    """Cores, Python, Redis and database versions, and the date: the header of the results."""
    import sqlite3

    import sqlalchemy  # noqa: F401  (its sqlite3 module is the one the store uses)

    from om_workers.coordination.embedded import find_redis_server

    redis = _version([str(find_redis_server()), "--version"])
    return "\n".join(
        [
            f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
            f"- machine: {os.cpu_count()} cores, {platform.machine()}, {platform.system()}",
            f"- python: {sys.version.split()[0]}",
            f"- redis: {redis}",
            f"- sqlite: {sqlite3.sqlite_version}",
            f"- postgresql: {_version(['psql', '--version'])}",
        ]
    )


def write_results(sections: list[Section], *, merge: bool = False) -> None:
    """Write ``results.md`` and the ratio plot ``results.png`` next to this file.

    With ``merge`` (only some benchmarks ran), an existing ``results.md`` keeps every other
    section and its header; each section that ran replaces the one with its heading (or is
    added last) with the date it was measured, and ``results.png`` is left as it is.
    """
    if merge and RESULTS_MD.exists():
        _merge_results(sections)
        return
    body = [
        "# Benchmark results",
        "",
        "Written by `make bench`. Every figure is measured against a baseline in the same run;",
        "ratio = figure / baseline.",
        "",
        machine(),
        "",
        *(s.markdown() for s in sections),
    ]
    RESULTS_MD.write_text("\n".join(body), encoding="utf-8")
    _plot(sections)
    print(f"wrote {RESULTS_MD} and {RESULTS_PNG}")


def _merge_results(sections: list[Section]) -> None:
    head, *parts = re.split(r"(?m)^(?=## )", RESULTS_MD.read_text(encoding="utf-8"))
    kept = {part.splitlines()[0]: part for part in parts}
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    for section in sections:
        text = section.markdown().rstrip("\n")
        kept[f"## {section.title}"] = f"{text}\n\n(measured {stamp}, on its own)\n\n"
    body = head + "".join(kept.values())
    RESULTS_MD.write_text(body.rstrip("\n") + "\n", encoding="utf-8")
    print(f"updated {len(sections)} section(s) of {RESULTS_MD}; {RESULTS_PNG} left as it was")


def _plot(sections: list[Section]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [s for s in sections if s.rows]
    fig, axes = plt.subplots(
        len(shown), 1, figsize=(10, 2.2 + 0.45 * sum(len(s.rows) for s in shown))
    )
    if len(shown) == 1:
        axes = [axes]
    for ax, section in zip(axes, shown, strict=True):
        names = [r.name for r in section.rows]
        ratios = [r.ratio for r in section.rows]
        ax.barh(names, ratios, color="#4c72b0")
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_title(section.title, fontsize=10)
        ax.tick_params(axis="y", labelsize=8)
        ax.set_xlabel("figure / baseline (log)", fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS_PNG, dpi=110)
    plt.close(fig)
