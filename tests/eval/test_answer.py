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


def test_answer_asks_and_judges_over_the_wire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The model knows two answers right, one wrong; the rest it calls "not mentioned".
    answers = {"dog's name": "Pickle", "Clara": "Lisbon", "plants": "five"}
    with model_server.serving(answers) as (url, seen):
        monkeypatch.setenv("OM_PROVIDER", "openai")
        monkeypatch.setenv("OM_PROVIDER_BASE_URL", url)
        monkeypatch.setenv("OM_PROVIDER_API_KEY", "sk-test-eval")
        monkeypatch.setenv("OM_MODEL", "tiny-model")
        monkeypatch.setenv("OM_PROVIDER_MAX_ATTEMPTS", "1")
        out = tmp_path / "r.json"
        result = CliRunner().invoke(
            app,
            ["eval", "locomo", str(synthetic.write(tmp_path)), "--answer", "--json", str(out),
             "--settings", json.dumps(synthetic.SETTINGS)],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "LLM judge" in result.output
    # Six questions have a gold answer (the adversarial one has none): Pickle and Lisbon right.
    assert "| **overall** | 7 |" in result.output and "| 2/6 (33.3%) |" in result.output
    report = json.loads(out.read_text(encoding="utf-8"))
    questions = report["conversations"][0]["questions"]
    judged = {q["index"]: q["judged"] for q in questions}
    assert judged[5] is None
    assert judged[0] == {"generated": "Pickle", "correct": True, "judge": judged[0]["judge"]}
    assert judged[2] is not None and judged[2]["generated"] == "five"
    assert judged[2]["correct"] is False
    assert report["overall"]["judge_accuracy"] == pytest.approx(2 / 6)
    # What went on the wire: the model saw the context and the question, never the gold answer.
    asks = [b for b in seen if not b.get("tools") and b["messages"][0]["role"] == "system"]
    assert len(asks) == 6
    assert all(b["model"] == "tiny-model" for b in seen)
    first = asks[0]["messages"]
    # (This model's observer records nothing, so the context is the recent window alone.)
    assert "<context>\n[user] I bought three new plants" in first[0]["content"]
    assert first[1]["content"] == "What is the dog's name?"
    assert "Gold" not in first[0]["content"]
    assert len([b for b in seen if "Gold answer:" in b["messages"][-1]["content"]]) == 6


def test_bench_skips_without_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.bench import bench_locomo

    monkeypatch.setattr(bench_locomo, "DATA", tmp_path / "absent")
    section = bench_locomo.run()
    assert section.rows == [] and "Skipped" in section.notes[0]


def test_bench_measures_a_folder(tmp_path: Path) -> None:
    from tests.bench import bench_locomo

    synthetic.write(tmp_path)
    [result] = bench_locomo.measure(synthetic.SETTINGS, tmp_path)
    assert result.turns == 6 and len(result.questions) == 7
