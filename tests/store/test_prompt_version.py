"""A deployment's prompts file (``OM_PROMPTS_FILE``), checked at start-up, and the prompt
version each flush job's row records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from om_core.flush.prompts import DEFAULT_PROMPTS
from om_workers.config import Settings
from om_workers.errors import ConfigError
from om_workers.prompts import load_prompts
from om_workers.services import build_services
from om_workers.store import SqlStore


def test_no_file_means_the_built_in_prompts() -> None:
    assert load_prompts(None) is DEFAULT_PROMPTS


def test_json_file_with_both_texts(tmp_path: Path) -> None:
    path = tmp_path / "prompts.json"
    body = {"version": "ours-1", "observer": "Observe.", "reflector": "Reflect."}
    path.write_text(json.dumps(body), encoding="utf-8")
    prompts = load_prompts(path)
    assert (prompts.version, prompts.observer, prompts.reflector) == (
        "ours-1",
        "Observe.",
        "Reflect.",
    )


def test_toml_file_keeps_the_built_in_text_it_leaves_out(tmp_path: Path) -> None:
    path = tmp_path / "prompts.toml"
    path.write_text('version = "obs-only-3"\nobserver = """\nObserve well.\n"""\n', "utf-8")
    prompts = load_prompts(path)
    assert prompts.version == "obs-only-3" and prompts.observer == "Observe well."
    assert prompts.reflector == DEFAULT_PROMPTS.reflector


@pytest.mark.parametrize(
    ("name", "text", "error"),
    [
        ("p.json", "{not json", "not valid JSON"),
        ("p.toml", "version = ", "not valid TOML"),
        ("p.json", "[1]", "expected a table"),
        ("p.json", '{"version": "v", "observer": "o", "extra": 1}', "unknown keys ['extra']"),
        ("p.json", '{"observer": "o"}', "needs a version"),
        ("p.json", '{"version": "custom", "observer": "o"}', "not 'custom'"),
        ("p.json", '{"version": "v"}', "neither observer nor reflector"),
        ("p.json", '{"version": "v", "observer": "  "}', "observer must be a non-empty string"),
    ],
)
def test_invalid_files_are_refused_with_a_clear_error(
    tmp_path: Path, name: str, text: str, error: str
) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="OM_PROMPTS_FILE") as raised:
        load_prompts(path)
    assert error in str(raised.value)


def test_a_bad_file_stops_start_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: SqlStore
) -> None:
    monkeypatch.setenv("OM_PROMPTS_FILE", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="cannot read it"):
        build_services(Settings(), store=store, redis=object())  # type: ignore[arg-type]
    good = tmp_path / "ok.json"
    good.write_text('{"version": "ours-2", "reflector": "Reflect."}', encoding="utf-8")
    monkeypatch.setenv("OM_PROMPTS_FILE", str(good))
    services = build_services(Settings(), store=store, redis=object())  # type: ignore[arg-type]
    assert services.prompts.version == "ours-2"


def test_job_row_records_the_prompt_version(store: SqlStore, tenant: str, session_id: str) -> None:
    job = store.create_job(tenant, session_id)
    assert job.prompt_version is None
    store.start_job(tenant, job.id)
    done = store.finish_job(tenant, job.id, "succeeded", prompt_version="ours-1")
    assert done.prompt_version == "ours-1"
    assert store.get_job(tenant, job.id).prompt_version == "ours-1"
    skipped = store.finish_job(tenant, store.create_job(tenant, session_id).id, "skipped")
    assert skipped.prompt_version is None  # never ran: no version
