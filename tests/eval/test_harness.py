"""The harness on a tiny hand-written conversation: reader, normalization, scoring, command."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from om_api.cli import app
from om_api.evaluation import (
    InProcessTarget,
    evaluate_conversation,
    load_conversations,
    normalize,
    run_messages,
    session_id_for,
    tally,
)
from om_api.evaluation.locomo import LocomoFormatError, parse_conversation
from om_api.evaluation.scoring import answer_in_context, evidence_one_hop, memory_refs
from om_core import ExtractiveProvider, resolve_settings
from om_workers.config import get_settings
from tests.eval import synthetic


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("OM_PROVIDER", "OM_MODEL", "OM_SETTINGS_JSON", "OM_PROVIDER_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_reader(tmp_path: Path) -> None:
    [conv] = load_conversations(synthetic.write(tmp_path))
    assert (conv.name, conv.speaker_a, conv.speaker_b) == ("tiny", "Ana", "Ben")
    assert [s.number for s in conv.sessions] == [1, 2]  # session 3 has a date, no turns
    first = conv.sessions[0]
    assert first.date is not None and first.date.isoformat() == "2024-03-03T10:00:00"
    assert first.turns[0].role == "user" and first.turns[1].role == "assistant"
    assert first.turns[0].text.endswith("[image: a photo of a small dog on a sofa]")
    assert "example.invalid" not in first.turns[0].text
    questions = conv.questions
    assert questions[2].answer == "3"  # ints become text
    assert questions[3].evidence == ("D2:1", "D1:2")
    assert questions[5].answer is None and questions[5].category_name == "adversarial"
    messages = run_messages("s", first)
    assert messages[0].entry_id == "s.S1" and messages[0].text.startswith("[session 1 date:")
    assert [m.entry_id for m in messages[1:]] == ["s.D1:1", "s.D1:2", "s.D1:3"]
    assert {m.created_at for m in messages} == {"2024-03-03T10:00:00Z"}


def test_reader_rejects_malformed(tmp_path: Path) -> None:
    with pytest.raises(LocomoFormatError, match="speaker_a"):
        parse_conversation({"session_1": []}, "bad")
    with pytest.raises(LocomoFormatError, match="no session"):
        parse_conversation({"speaker_a": "A", "speaker_b": "B"}, "bad")
    path = tmp_path / "broken.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(LocomoFormatError, match="not JSON"):
        load_conversations(path)


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("7 May 2023", "7 may 2023"),
        ("May 7, 2023", "7 may 2023"),
        ("on the 7th of May, 2023!", "on 7 may 2023"),
        ("2023-05-07", "7 may 2023"),
        ("Sept. 3rd, 2022", "3 september 2022"),
        ("19 January, 2023", "19 january 2023"),
        ("Two kids", "2 kids"),
        ("Mel's dog", "mels dog"),
        ("The Grand Canyon", "grand canyon"),
        ("an apple, a pear", "apple pear"),
        ("  Lots   of\nspace ", "lots of space"),
        ("May I?", "may i"),
    ],
)
def test_normalize(text: str, normal: str) -> None:
    assert normalize(text) == normal


def test_scoring_crafted_case() -> None:
    context = normalize(
        "- [om:0123456789ab] User: we moved to New York on May 7, 2023 with two cats"
    )
    assert answer_in_context("7 May 2023", context) is True
    assert answer_in_context("New York", context) is True
    assert answer_in_context("York City", context) is False
    assert answer_in_context("2 cats", context) is True
    assert answer_in_context("cat", context) is False  # word boundaries, not substrings
    assert answer_in_context("one two three four five six", context) is None  # too long
    assert answer_in_context(None, context) is None
    assert memory_refs("[om:0123456789ab] x [reflection:ba9876543210] [om:0123456789ab]") == [
        "om:0123456789ab",
        "reflection:ba9876543210",
    ]
    reachable = frozenset({"a", "b"})
    assert evidence_one_hop(["a", "b"], reachable) is True
    assert evidence_one_hop(["a", "c"], reachable) is False
    assert evidence_one_hop([], reachable) is None


def test_replay_scores_known_answers(tmp_path: Path) -> None:
    [conv] = load_conversations(synthetic.write(tmp_path))
    target = InProcessTarget(resolve_settings(synthetic.SETTINGS), ExtractiveProvider())
    seen: list[tuple[int, int]] = []
    result = evaluate_conversation(
        conv, target, session_id=session_id_for(conv), progress=lambda d, t: seen.append((d, t))
    )
    assert seen == [(1, 2), (2, 2)]
    got = {r.question.index: (r.answer_in_context, r.evidence_one_hop) for r in result.questions}
    assert got == synthetic.EXPECTED
    assert result.questions[4].missing_evidence == ("D1:3",)
    assert result.questions[6].unknown_evidence == ("D9:9",)
    assert result.recent_messages_shown == 2
    assert result.context_tokens > 0 and result.raw_tokens > 0
    # Entries carry the session date; memory records the date of the run that wrote them.
    entries = target.entries(result.session_id)
    assert entries[0].created_at == "2024-03-03T10:00:00Z"
    assert any(e.kind == "custom" and e.created_at == "2024-03-10T16:30:00Z" for e in entries)
    categories, overall = tally([result])
    assert (overall.answer_hits, overall.answer_scored) == (3, 5)
    assert (overall.evidence_hits, overall.evidence_scored) == (6, 7)
    assert list(categories) == ["multi-hop", "temporal", "open-domain", "single-hop", "adversarial"]


def test_command_end_to_end(tmp_path: Path) -> None:
    data = synthetic.write(tmp_path)
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    result = CliRunner().invoke(
        app,
        ["eval", "locomo", str(data), "--settings", json.dumps(synthetic.SETTINGS),
         "--json", str(out_json), "--markdown", str(out_md)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "| **overall** | 7 | 3/5 (60.0%) | 6/7 (85.7%) |" in result.output
    assert out_md.read_text(encoding="utf-8") in result.output
    report = json.loads(out_json.read_text(encoding="utf-8"))
    assert report["meta"]["mode"] == "in-process"
    assert report["meta"]["settings"]["observation"]["messageTokens"] == 1
    assert report["overall"]["answer_in_context_rate"] == pytest.approx(0.6)
    [conv] = report["conversations"]
    assert conv["turns"] == 6 and conv["ratio"] == pytest.approx(
        conv["context_tokens"] / conv["raw_tokens"], abs=1e-4
    )
    assert [q["answer_in_context"] for q in conv["questions"]] == [
        synthetic.EXPECTED[i][0] for i in range(7)
    ]


def test_command_defaults_keep_the_tail_unobserved(tmp_path: Path) -> None:
    # The default 10,000 tokens before observing: nothing is observed, only the window shows.
    window = json.dumps({"context": {"recentMessages": 2}})
    data = str(synthetic.write(tmp_path))
    result = CliRunner().invoke(app, ["eval", "locomo", data, "--settings", window])
    assert result.exit_code == 0, result.output
    assert "| **overall** | 7 | 1/5 (20.0%) | 1/7 (14.3%) |" in result.output
    forced = CliRunner().invoke(app, ["eval", "locomo", data, "--settings", window, "--force"])
    assert "| **overall** | 7 | 3/5 (60.0%) | 6/7 (85.7%) |" in forced.output


def test_absent_path_skips(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", "locomo", str(tmp_path / "nowhere")])
    assert result.exit_code == 0
    assert "no LoCoMo data" in result.output and "skipped" in result.output


def test_bad_usage(tmp_path: Path) -> None:
    data = str(synthetic.write(tmp_path))
    runner = CliRunner()
    assert runner.invoke(app, ["eval", "locomo", data, "--settings", "{"]).exit_code == 2
    bad = runner.invoke(app, ["eval", "locomo", data, "--settings", '{"observeAfterTokens": 1}'])
    assert bad.exit_code == 2
    no_model = runner.invoke(app, ["eval", "locomo", data, "--answer"])
    assert no_model.exit_code == 2 and "OM_PROVIDER" in no_model.output
    broken = tmp_path / "broken.json"
    broken.write_text("[1", encoding="utf-8")
    assert runner.invoke(app, ["eval", "locomo", str(broken)]).exit_code == 2
