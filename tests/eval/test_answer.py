"""``--answer`` against a local OpenAI-compatible wire-format server, and the bench's skip."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from om_api.cli import app
from om_api.evaluation import parse_label
from om_workers.config import get_settings
from tests.eval import model_server, synthetic


@pytest.fixture(autouse=True)
def _fresh_settings() -> Iterator[None]:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_parse_label() -> None:
    assert parse_label('It matches. {"label": "CORRECT"}') is True
    assert parse_label('{"label": "wrong"}') is False
    assert parse_label("Not the same place. WRONG") is False
    assert parse_label("CORRECT") is True
    assert parse_label("no verdict at all") is False


def _serve_env(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("OM_PROVIDER", "openai")
    monkeypatch.setenv("OM_PROVIDER_BASE_URL", url)
    monkeypatch.setenv("OM_PROVIDER_API_KEY", "sk-test-eval")
    monkeypatch.setenv("OM_MODEL", "tiny-model")
    monkeypatch.setenv("OM_PROVIDER_MAX_ATTEMPTS", "1")


# The model knows two answers right, one wrong; the rest it calls "not mentioned".
ANSWERS = {"dog's name": "Pickle", "Clara": "Lisbon", "plants": "five"}
# Judged: categories 1-4 with a gold answer (the adversarial question has none).
JUDGED = [i for i, q in enumerate(synthetic.CONVERSATION["qa"]) if q["category"] != 5]


def test_answer_asks_and_judges_over_the_wire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with model_server.serving(ANSWERS) as (url, seen):
        _serve_env(monkeypatch, url)
        out = tmp_path / "r.json"
        result = CliRunner().invoke(
            app,
            ["eval", "locomo", str(synthetic.write(tmp_path)), "--answer", "--json-file", str(out),
             "--settings", json.dumps(synthetic.SETTINGS)],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "LLM judge, memory" in result.output
    # Eight judged questions: Pickle and Lisbon right.
    assert f"| **overall** | {len(JUDGED)} | 25.0% (2/8) | - | - |" in result.output
    report = json.loads(out.read_text(encoding="utf-8"))
    questions = report["conversations"][0]["questions"]
    judged = {q["index"]: q["judged"] for q in questions}
    assert judged[5] is None
    assert judged[0] == [{"generated": "Pickle", "correct": True, "judge": judged[0][0]["judge"]}]
    assert judged[2] is not None and judged[2][0]["generated"] == "five"
    assert judged[2][0]["correct"] is False
    assert report["overall"]["judge_accuracy"]["mean"] == pytest.approx(2 / 8)
    assert report["overall"]["judged_correct_per_run"] == [2]
    # What went on the wire: the model saw the context and the question, never the gold answer.
    asks = [b for b in seen if not b.get("tools") and b["messages"][0]["role"] == "system"]
    assert len(asks) == len(JUDGED)
    assert all(b["model"] == "tiny-model" for b in seen)
    first = asks[0]["messages"]
    # (This model's observer records nothing yet its flushes move the observation cursor on,
    # so the context is the recent block's floor alone, and the report says what that loses.)
    assert "<context>\n[user] I bought three new plants" in first[0]["content"]
    [conv] = report["conversations"]
    assert conv["memory_items_shown"] == 0 and conv["turns_out_of_reach"] == 5
    assert report["reach"]["date_lines_out_of_reach"] == 2
    assert first[1]["content"] == "What is the dog's name?"
    assert "Gold" not in first[0]["content"]
    assert len([b for b in seen if "Gold answer:" in b["messages"][-1]["content"]]) == len(JUDGED)


def test_answer_runs_and_baselines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with model_server.serving(ANSWERS) as (url, seen):
        _serve_env(monkeypatch, url)
        out = tmp_path / "r.json"
        result = CliRunner().invoke(
            app,
            ["eval", "locomo", str(synthetic.write(tmp_path)), "--answer", "--runs", "2",
             "--baselines", "--json-file", str(out), "--settings", json.dumps(synthetic.SETTINGS)],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    judge_calls = [b for b in seen if "Gold answer:" in b["messages"][-1]["content"]]
    assert len(judge_calls) == len(JUDGED) * 2 * 3  # two runs of memory and two baselines
    cell = "25.0% ± 0.0% (25.0%–25.0%, 2 runs)"
    assert f"| **overall** | {len(JUDGED)} | {cell} | {cell} | {cell} |" in result.output
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["meta"]["runs"] == 2
    assert report["meta"]["baselines"] == ["full-transcript", "no-memory"]
    overall = report["overall"]
    assert overall["judged_correct_per_run"] == [2, 2]
    assert overall["judge_accuracy"] == {"mean": 0.25, "sd": 0.0, "low": 0.25, "high": 0.25}
    assert overall["baselines"]["no-memory"]["correct_per_run"] == [2, 2]
    first = report["conversations"][0]["questions"][0]
    assert len(first["judged"]) == 2 and set(first["baselines"]) == {
        "full-transcript", "no-memory"
    }  # fmt: skip
    # The no-memory baseline sees an empty context; the transcript every replayed message
    # (the memory context here shows only the last two).
    systems = [b["messages"][0]["content"] for b in seen if b["messages"][0]["role"] == "system"]
    assert any("<context>\n\n</context>" in s for s in systems)
    assert any("[assistant] My sister Clara moved to Lisbon" in s for s in systems)


def test_bench_skips_without_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.bench import bench_locomo

    monkeypatch.setattr(bench_locomo, "DATA", tmp_path / "absent")
    section = bench_locomo.run()
    assert section.rows == [] and "Skipped" in section.notes[0]


def test_bench_measures_a_folder(tmp_path: Path) -> None:
    from tests.bench import bench_locomo

    synthetic.write(tmp_path)
    synthetic.write(tmp_path, "other.json", synthetic.OTHER)
    results = bench_locomo.measure(synthetic.SETTINGS, tmp_path)
    assert [(r.name, r.turns, len(r.questions)) for r in results] == [
        ("other", 3, 2),
        ("tiny", 7, 9),
    ]
    figures = bench_locomo.figures(results)
    assert figures["grounded"] == (5, 7) and figures["chance_grounded"] == (2, 7)
    assert figures["ungrounded"] == (6, 7) and figures["out_of_reach"] == 0
