"""The harness on small hand-written conversations: reader, replay, scoring, command."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from om_api.cli import app
from om_api.evaluation import (
    ConversationResult,
    InProcessTarget,
    chance_control,
    evaluate_conversation,
    load_conversations,
    run_messages,
    session_id_for,
    tally,
)
from om_api.evaluation.locomo import LocomoFormatError, parse_conversation
from om_api.evaluation.report import to_json, to_markdown
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


def _replay(
    path: Path, settings: Mapping[str, Any] = synthetic.SETTINGS, max_tokens: int = 32_000
) -> ConversationResult:
    [conv] = load_conversations(path)
    memory = InProcessTarget(
        resolve_settings(settings), ExtractiveProvider(), max_tokens=max_tokens
    )
    return evaluate_conversation(conv, memory, session_id=session_id_for(conv))


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
    assert [m.entry_id for m in messages[1:]] == ["s.D1:1", "s.D1:2", "s.D1:3", "s.D1:4"]
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


def test_replay_scores_known_answers(tmp_path: Path) -> None:
    [conv] = load_conversations(synthetic.write(tmp_path))
    target = InProcessTarget(resolve_settings(synthetic.SETTINGS), ExtractiveProvider())
    seen: list[tuple[int, int]] = []
    result = evaluate_conversation(
        conv, target, session_id=session_id_for(conv), progress=lambda d, t: seen.append((d, t))
    )
    assert seen == [(1, 2), (2, 2)]
    got = {
        r.question.index: (r.grounded, r.answer_in_context, r.evidence_one_hop)
        for r in result.questions
    }
    assert got == synthetic.EXPECTED
    left_out = {r.question.index: r.match_status for r in result.questions}
    assert {i: s for i, s in left_out.items() if s != "scored"} == synthetic.LEFT_OUT
    assert result.questions[3].evidence == ("D2:1", "D1:2")
    assert result.questions[6].unknown_evidence == ("D9:9",)
    # Everything was observed: the recent block shows its floor of two, nothing is lost.
    assert result.recent_messages_shown == 2 and result.unobserved_messages == 0
    assert result.out_of_reach == () and result.date_lines_out_of_reach == 0
    assert result.context_tokens > 0 and result.raw_tokens > 0
    # Entries carry the session date; memory records the date of the run that wrote them.
    entries = target.entries(result.session_id)
    assert entries[0].created_at == "2024-03-03T10:00:00Z"
    assert any(e.kind == "custom" and e.created_at == "2024-03-10T16:30:00Z" for e in entries)
    categories, overall = tally([result])
    assert (overall.grounded, overall.ungrounded, overall.answer_scored) == (3, 4, 5)
    assert overall.left_out == {
        "no_answer": 1, "yes_no": 1, "small_number": 1, "long": 1, "no_evidence": 0
    }  # fmt: skip
    assert (overall.evidence_turns_reached, overall.evidence_turns) == (10, 10)
    assert overall.chance_scored == 0  # one conversation: no control
    assert list(categories) == [1, 2, 3, 4, 5]
    assert categories[4].questions == 3 and categories[4].grounded == 1


def test_chance_control_scores_against_another_conversation(tmp_path: Path) -> None:
    tiny = _replay(synthetic.write(tmp_path))
    other = _replay(synthetic.write(tmp_path, "other.json", synthetic.OTHER))
    [tiny_chance, other_chance] = chance_control([tiny, other])
    assert tiny_chance is not None and other_chance is not None
    by_index = {q.question.index: c for q, c in zip(tiny.questions, tiny_chance, strict=True)}
    # other's D1:1 also names a Pickle: found at the same evidence position.
    assert (by_index[0].grounded, by_index[0].ungrounded) == (True, True)
    # other's session date is 2 March 2024: anywhere in its context, not in its D1:2.
    assert (by_index[1].grounded, by_index[1].ungrounded) == (False, True)
    assert (by_index[8].grounded, by_index[8].ungrounded) == (False, False)
    assert by_index[2].grounded is None  # left out of the string match, here as well
    assert [(c.grounded, c.ungrounded) for c in other_chance] == [(True, True), (False, False)]
    _, overall = tally([tiny, other])
    assert (overall.chance_grounded, overall.chance_ungrounded, overall.chance_scored) == (2, 3, 7)
    assert (overall.grounded, overall.answer_scored) == (5, 7)
    report = to_json([tiny, other], {})
    assert [c["chance_context"] for c in report["conversations"]] == ["other", "tiny"]
    assert report["conversations"][0]["questions"][1]["chance"] == {
        "grounded": False, "ungrounded": True
    }  # fmt: skip
    assert report["overall"]["chance_ungrounded_rate"] == pytest.approx(3 / 7)
    assert "| **overall** | 11 | 7 | 5/7 (71.4%) | 2/7 (28.6%) | 6/7 (85.7%) | 3/7 (42.9%) |" in (
        to_markdown([tiny, other])
    )


def test_reach_counts_messages_neither_shown_nor_recallable(tmp_path: Path) -> None:
    # Nothing observed (the default 10,000-token threshold) and a 256-token budget: the
    # recent block keeps the newest turns, the older ones are neither shown nor recallable.
    turns = [
        f"Turn {k} of a long chat about the garden, the weather and the week." for k in range(40)
    ]
    qa = [
        {"question": "First?", "answer": "garden", "evidence": ["D1:1"], "category": 4},
        {"question": "Last?", "answer": "garden", "evidence": ["D1:40"], "category": 4},
    ]
    path = synthetic.write(tmp_path, "long.json", synthetic.build([turns], qa))
    result = _replay(path, {}, max_tokens=256)
    assert result.memory_items_shown == 0 and result.unobserved_messages == 41
    assert 0 < result.gap_messages < 41
    shown = set(result.shown.recent)
    assert "D1:40" in shown and "D1:1" not in shown
    assert len(result.out_of_reach) == 40 - len(shown) and "D1:1" in result.out_of_reach
    assert result.date_lines_out_of_reach == 1
    first, last = result.questions
    assert (first.evidence_one_hop, first.missing_evidence, first.grounded) == (
        False, ("D1:1",), False
    )  # fmt: skip
    assert (last.evidence_one_hop, last.grounded) == (True, True)
    report = to_json([result], {})
    assert report["reach"] == {"turns": 40, "turns_out_of_reach": 40 - len(shown),
                               "date_lines_out_of_reach": 1}  # fmt: skip


def test_command_end_to_end(tmp_path: Path) -> None:
    data = synthetic.write(tmp_path)
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    result = CliRunner().invoke(
        app,
        ["eval", "locomo", str(data), "--settings", json.dumps(synthetic.SETTINGS),
         "--json-file", str(out_json), "--markdown", str(out_md)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "| **overall** | 9 | 5 | 3/5 (60.0%) | - | 4/5 (80.0%) | - |" in result.output
    assert "| **overall** | 1 | 1 | 1 | 1 | 0 |" in result.output  # left out, by reason
    assert "| **overall** | 10/10 (100.0%) | 9/9 (100.0%) |" in result.output
    assert "| 4 single-hop | 3 | 3 | 1/3 (33.3%) |" in result.output
    assert out_md.read_text(encoding="utf-8") in result.output
    report = json.loads(out_json.read_text(encoding="utf-8"))
    assert report["meta"]["mode"] == "in-process"
    assert report["meta"]["settings"]["observation"]["messageTokens"] == 1
    assert report["meta"]["max_tokens"] == 32_000
    assert report["overall"]["grounded_rate"] == pytest.approx(0.6)
    assert report["overall"]["ungrounded_rate"] == pytest.approx(0.8)
    assert report["by_category"]["4"]["name"] == "single-hop"
    assert report["by_category"]["4"]["questions"] == 3
    [conv] = report["conversations"]
    assert conv["turns"] == 7 and conv["ratio"] == pytest.approx(
        conv["context_tokens"] / conv["raw_tokens"], abs=1e-4
    )
    assert conv["chance_context"] is None and conv["turns_out_of_reach"] == 0
    assert [q["grounded"] for q in conv["questions"]] == [
        synthetic.EXPECTED[i][0] for i in range(9)
    ]


def test_json_flag_prints_the_report_instead_of_markdown(tmp_path: Path) -> None:
    data = str(synthetic.write(tmp_path))
    settings = json.dumps(synthetic.SETTINGS)
    result = CliRunner().invoke(app, ["eval", "locomo", data, "--settings", settings, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # stdout is the JSON report and nothing else
    assert report["meta"]["mode"] == "in-process"
    assert report["overall"]["grounded_rate"] == pytest.approx(0.6)
    assert "| **overall** |" not in result.stdout
    empty = CliRunner().invoke(app, ["eval", "locomo", str(tmp_path / "nowhere"), "--json"])
    assert empty.exit_code == 0 and empty.stdout == ""
    assert "no LoCoMo data" in empty.stderr


def test_command_defaults_keep_the_tail_unobserved(tmp_path: Path) -> None:
    # The default 10,000 tokens before observing: nothing is observed, and the recent block
    # shows every unobserved message (not only its floor of two), so all turns are shown.
    window = json.dumps({"context": {"recentMessages": 2}})
    data = str(synthetic.write(tmp_path))
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        app, ["eval", "locomo", data, "--settings", window, "--json-file", str(out)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text(encoding="utf-8"))
    [conv] = report["conversations"]
    assert conv["memory_items_shown"] == 0 and conv["unobserved"]["messages"] == 9
    assert conv["recent_messages_shown"] == 9 and conv["turns_out_of_reach"] == 0
    # Every turn is shown verbatim, yet question 8's "Lisbon" (said in D2:1, not in its
    # evidence D1:4) is still not grounded; observed with --force, the figures stay.
    line = "| **overall** | 9 | 5 | 3/5 (60.0%) | - | 4/5 (80.0%) | - |"
    assert line in result.output
    forced = CliRunner().invoke(app, ["eval", "locomo", data, "--settings", window, "--force"])
    assert line in forced.output and "| tiny | 2 | 7 | 97 |" in forced.output


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
    runs = runner.invoke(app, ["eval", "locomo", data, "--runs", "3"])
    assert runs.exit_code == 2 and "--answer" in runs.output
    assert runner.invoke(app, ["eval", "locomo", data, "--max-tokens", "10"]).exit_code == 2
    broken = tmp_path / "broken.json"
    broken.write_text("[1", encoding="utf-8")
    assert runner.invoke(app, ["eval", "locomo", str(broken)]).exit_code == 2
