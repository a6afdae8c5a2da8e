"""The container suite runs only under ``make test-containers`` (``python -m tests.containers``),
which builds the images first and sets :data:`FIGURES_VAR`; plain ``pytest`` collects nothing
here (``make test`` stays within its budget and needs no podman).

One topology serves the whole session (:func:`stack`); the tests run in the order the driver
names the files, the faults after the probes and the scaling last. Figures the tests measure go
into :func:`figures`, written as JSON to the path in :data:`FIGURES_VAR` at the end.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from tests.containers.stack import ComposeStack

FIGURES_VAR: Final = "CONTAINERS_FIGURES"
"""Where the suite writes its figures (set by the driver); unset: the suite is not collected."""
KEEP_VAR: Final = "CONTAINERS_KEEP"
"""Set to 1 to leave the topology running after the suite (to look at it; tear it down with
``python -m tests.containers --down``)."""

collect_ignore_glob = [] if os.environ.get(FIGURES_VAR) else ["test_*.py"]


@pytest.fixture(scope="session")
def figures() -> Iterator[dict[str, Any]]:
    found: dict[str, Any] = {}
    yield found
    path = os.environ.get(FIGURES_VAR)
    if path:
        Path(path).write_text(json.dumps(found, indent=2, default=str))


@pytest.fixture(scope="session")
def stack(figures: dict[str, Any]) -> Iterator[ComposeStack]:
    log_dir = Path(tempfile.mkdtemp(prefix="om-containers-"))
    running = ComposeStack(log_dir, say=lambda line: print(line, flush=True))
    figures["logs"] = str(log_dir)
    tuning = running.tuning
    figures["tuning"] = (
        f"{tuning.workers} workers x {tuning.worker_concurrency} slots, lock TTL "
        f"{tuning.lock_ttl_s:g} s, reconcile interval {tuning.reconcile_interval_s:g} s, "
        f"provider {tuning.provider_delay_s:g} s a call"
    )
    try:
        running.start()
        figures["stack"] = running.timings
        yield running
    finally:
        began = time.monotonic()
        if os.environ.get(KEEP_VAR) == "1":
            running.save_logs()
        else:
            running.teardown()
        running.timings["teardown"] = time.monotonic() - began
