"""The malformed-input probe of ``make chaos`` against real ``om api`` processes on each store,
and the results file's sections, which a run of only those parts replaces in place."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.chaos.malformed import Backend, ProbeReport, probe_backend
from tests.chaos.results import Report, merge, sections
from tests.chaos.topology import FULL
from tests.deploy.rehearsal import postgres_available


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_malformed_input_is_a_4xx_and_stores_nothing(backend: Backend) -> None:
    if backend == "postgresql" and (reason := postgres_available()) is not None:
        pytest.skip(f"the probe's PostgreSQL API needs PostgreSQL: {reason}")
    report = probe_backend(backend, say=lambda _m: None)
    assert report.probes > 100
    assert not report.failures(), report.failures()
    assert sum(report.statuses.values()) == report.probes
    assert all(400 <= int(status) < 500 for status in report.statuses), report.statuses


def _probes(five_xx: int) -> list[ProbeReport]:
    return [
        ProbeReport(
            backend,
            probes=3,
            statuses=Counter({"422": 3 - five_xx, **({"500": five_xx} if five_xx else {})}),
            by_kind=Counter({"raw bytes": 3}),
            five_xx=["raw bytes: raw NUL byte: 500"] * five_xx,
        )
        for backend in ("postgresql", "sqlite")
    ]


def test_a_partial_run_replaces_its_section_and_keeps_the_rest() -> None:
    existing = (
        "# Chaos matrix results\n\n| fault | healed |\n|---|---|\n| x | yes |\n\n## Notes\n\n- n\n"
    )
    clean = sections(Report(FULL, probes=_probes(0), only=("malformed",)))["malformed"]
    failing = sections(Report(FULL, probes=_probes(1), only=("malformed",)))["malformed"]
    first = merge(existing, {"malformed": clean})
    notes = existing.index("\n## Notes\n")
    assert first.startswith(existing[:notes]) and first.endswith(existing[notes:])
    verdict = "**Zero 5xx for NUL, surrogates and every other malformed input on both stores**"
    assert verdict in first
    second = merge(first, {"malformed": failing})
    assert second.count("<!-- chaos:malformed -->") == 1
    assert "**2 5xx for malformed input** (PostgreSQL and SQLite)" in second
    assert verdict not in second
    assert second.replace(failing, "") == first.replace(clean, "")
