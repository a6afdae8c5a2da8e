"""The chaos matrix's short form (``make test``): one fault of each kind (a worker killed
mid-flush, Redis restarted empty, PostgreSQL unreachable, the API killed and restarted, the
provider answering 500s that quote its key) on the real topology, with short timings and a
small load; after each, nothing is lost, duplicated, overlapping, stuck or leaked, and no 5xx
came outside the fault. The full matrix (default timings, both brokers) is ``make chaos``."""

from __future__ import annotations

import pytest

from tests.chaos.faults import BY_SLUG, SHORT_FORM
from tests.chaos.results import Report, table
from tests.chaos.runner import run_leg
from tests.chaos.topology import SHORT
from tests.deploy.rehearsal import postgres_available


def test_one_fault_of_each_kind_heals_with_nothing_lost_duplicated_or_leaked() -> None:
    if (reason := postgres_available()) is not None:
        pytest.skip(f"the chaos topology needs PostgreSQL: {reason}")
    report = Report(SHORT)
    run_leg(report, "redis", [BY_SLUG[slug] for slug in SHORT_FORM], say=lambda _m: None)
    assert [row.fault.slug for row in report.rows] == list(SHORT_FORM)
    failures = {row.fault.slug: row.failures() for row in report.rows if row.failures()}
    assert not failures, f"{failures}\n{table(report.rows)}"
