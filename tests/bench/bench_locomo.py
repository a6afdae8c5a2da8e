"""8. LoCoMo conversations, extractive provider: what the memory keeps of three real, long
two-person conversations (read from :data:`DATA`; skipped when absent).

Each session is one agent run with a flush after it (``om eval locomo``'s replay, in process).
Figures: answer-in-context rate (short gold answers found in the context blocks' text),
one-hop evidence rate (every evidence turn in the recent window or cited by a shown memory id)
and the context's size against the raw history's, at two ``observation.messageTokens``.
"""

from __future__ import annotations

from pathlib import Path

from om_api.evaluation import InProcessTarget, evaluate_conversation, load_conversations, tally
from om_api.evaluation.report import compression
from om_api.evaluation.runner import ConversationResult, session_id_for
from om_core import ExtractiveProvider, resolve_settings

from .common import Section

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo"
SETTINGS = (("defaults", {}), ("messageTokens 2,000", {"observation": {"messageTokens": 2_000}}))


def measure(settings_json: dict[str, object], data: Path = DATA) -> list[ConversationResult]:
    """Replay every conversation under ``settings_json`` and score it."""
    settings = resolve_settings(settings_json)
    results = []
    for path in sorted(data.glob("*.json")):
        for conversation in load_conversations(path):
            target = InProcessTarget(settings, ExtractiveProvider())
            results.append(
                evaluate_conversation(conversation, target, session_id=session_id_for(conversation))
            )
    return results


def run() -> Section:
    section = Section("8. LoCoMo conversations, extractive provider (om eval locomo)")
    if not any(DATA.glob("*.json")):
        section.notes.append(f"Skipped: no LoCoMo data at {DATA}.")
        return section
    for label, settings_json in SETTINGS:
        results = measure(settings_json)
        _, overall = tally(results)
        section.add(
            f"answers in context ({label}, {overall.answer_scored} short answers)",
            100 * overall.answer_hits / max(1, overall.answer_scored),
            "%",
            "short gold answers",
            100.0,
        )
        section.add(
            f"evidence one recall away ({label}, {overall.evidence_scored} questions)",
            100 * overall.evidence_hits / max(1, overall.evidence_scored),
            "%",
            "questions with evidence",
            100.0,
        )
        tokens = compression(results)
        section.add(
            f"context tokens ({label}, {len(results)} conversations)",
            tokens["context_tokens"],
            "tokens",
            "raw history tokens",
            tokens["raw_tokens"],
        )
    section.notes.append(
        "Sessions replayed as agent runs (speaker A user, speaker B assistant, image captions "
        "as text, a session-date line first), a flush after each. Answer in context: the "
        "normalized gold answer of five words or fewer occurs in the context blocks' text. "
        "Evidence one hop: every evidence turn is in the recent window or a direct source of a "
        "memory id shown. The extractive heuristic keeps each message's first sentence, so "
        "facts after a short opener and relative dates ('last week') are lost from the text "
        "but stay one recall away; with the default 10,000-token threshold the last "
        "unobserved stretch of each conversation is neither shown nor recallable."
    )
    return section
