"""The README's tour runs as written."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "in_process.py"


def test_in_process_tour_observes_renders_and_recalls(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert "## Observations" in out
    assert "[user] Day 5: please deploy build 105 to staging." in out
    assert "rests on: ['Day 1: please deploy build 101 to staging.']" in out
