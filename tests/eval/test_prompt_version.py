"""``om eval locomo`` says which prompt version made the memory it scores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from om_api.cli import app
from om_core.flush.prompts import DEFAULT_PROMPTS
from om_workers.config import get_settings
from tests.eval import synthetic


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("OM_PROVIDER", "OM_MODEL", "OM_SETTINGS_JSON", "OM_PROMPTS_FILE"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _run(tmp_path: Path, *extra: str) -> tuple[str, dict[str, object]]:
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        app,
        ["eval", "locomo", str(synthetic.write(tmp_path)), "--settings",
         json.dumps(synthetic.SETTINGS), "--json-file", str(out), *extra],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    meta = json.loads(out.read_text(encoding="utf-8"))["meta"]
    return result.output, meta


def test_report_names_the_built_in_prompt_version(tmp_path: Path) -> None:
    output, meta = _run(tmp_path)
    assert meta["prompt_version"] == DEFAULT_PROMPTS.version
    assert f"Prompts {DEFAULT_PROMPTS.version}; provider extractive, model extractive." in output


def test_report_names_the_prompts_file_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ours.toml"
    path.write_text('version = "ours-1"\nobserver = "Observe."\n', encoding="utf-8")
    monkeypatch.setenv("OM_PROMPTS_FILE", str(path))
    _, meta = _run(tmp_path)
    assert meta["prompt_version"] == "ours-1"


def test_a_bad_prompts_file_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"observer": "no version"}', encoding="utf-8")
    monkeypatch.setenv("OM_PROMPTS_FILE", str(path))
    result = CliRunner().invoke(app, ["eval", "locomo", str(synthetic.write(tmp_path))])
    assert result.exit_code == 2
    assert "needs a version" in result.output
