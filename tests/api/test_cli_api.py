"""``om api`` with settings it cannot use: one line on stderr and a non-zero exit (as ``om
worker``), never uvicorn's traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXIT_WAIT_S = 240
"""A hang guard, not a speed limit: three interpreters importing the app at once on a loaded
two-core machine took over a minute; pytest's own timeout (300 s) stays above it."""

CASES = {
    "no OM_REDIS_URL": ({}, "om: OM_REDIS_URL is unset"),
    "bad OM_SETTINGS_JSON": (
        {"OM_REDIS_URL": "redis://127.0.0.1:1/0", "OM_SETTINGS_JSON": '{"bogus": 1}'},
        "om: invalid observational-memory settings: bogus",
    ),
    "bad OM_MAX_BODY_BYTES": (
        {"OM_REDIS_URL": "redis://127.0.0.1:1/0", "OM_MAX_BODY_BYTES": "lots"},
        "om: invalid OM_* settings: OM_MAX_BODY_BYTES",
    ),
}


def test_om_api_fails_with_one_line(tmp_path: Path) -> None:
    # All at once: each run is mostly the interpreter importing the app.
    base = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    runs: dict[str, subprocess.Popen[str]] = {}
    for case, (extra, _) in CASES.items():
        home = tmp_path / case.replace(" ", "-")
        home.mkdir()
        env = {**base, "OM_DATABASE_URL": f"sqlite:///{home / 'om.db'}", **extra}
        runs[case] = subprocess.Popen(
            [sys.executable, "-m", "om_api.cli", "api", "--port", "0"],
            env=env,
            cwd=home,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    for case, run in runs.items():
        stdout, stderr = run.communicate(timeout=EXIT_WAIT_S)
        assert run.returncode == 2, (case, stderr)
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(CASES[case][1]), (case, stderr)
        assert "Traceback" not in stderr and stdout == "", case
