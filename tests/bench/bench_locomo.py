"""8. LoCoMo conversations, extractive provider: what the memory keeps of three real, long
two-person conversations (every ``*.json`` in :data:`DATA`; skipped when there is none).

Each session is one agent run with a flush after it (``om eval locomo``'s replay, in process,
context read with the service's default budget). Figures (definitions in docs/evaluation.md):
grounded answer-in-context (the short gold answer in the text shown for its own evidence turns)
beside its chance control (the same answers against another conversation's context) and the
ungrounded match (anywhere in the context); evidence turns shown or one recall away; turns
neither; and the context's size against the raw history's, at two ``observation.messageTokens``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from om_api.evaluation import InProcessTarget, evaluate_conversation, load_conversations, tally
from om_api.evaluation.report import compression, reach
from om_api.evaluation.runner import ConversationResult, session_id_for
from om_core import ExtractiveProvider, resolve_settings

from .common import Section

DATA = Path(
    os.environ.get("OM_LOCOMO_DATA")
    or Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo"
)
"""The LoCoMo folder: ``OM_LOCOMO_DATA``, else ``shared/data/locomo`` beside the checkout."""
SETTINGS: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("defaults", {}),
    ("messageTokens 2,000", {"observation": {"messageTokens": 2_000}}),
)


def measure(settings_json: Mapping[str, Any], data: Path = DATA) -> list[ConversationResult]:
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


def figures(results: list[ConversationResult]) -> dict[str, Any]:
    """The bench's figures: ``(hits, scored)`` pairs, counts and token sums."""
    _, overall = tally(results)
    return {
        "grounded": (overall.grounded, overall.answer_scored),
        "chance_grounded": (overall.chance_grounded, overall.chance_scored),
        "ungrounded": (overall.ungrounded, overall.answer_scored),
        "chance_ungrounded": (overall.chance_ungrounded, overall.chance_scored),
        "left_out": dict(overall.left_out),
        "evidence": (overall.evidence_turns_reached, overall.evidence_turns),
        "out_of_reach": reach(results)["turns_out_of_reach"],
        "turns": reach(results)["turns"],
        "tokens": compression(results),
    }


def _pct(pair: tuple[int, int]) -> float:
    return 100 * pair[0] / max(1, pair[1])


def run() -> Section:
    section = Section("8. LoCoMo conversations, extractive provider (om eval locomo)")
    if not any(DATA.glob("*.json")):
        section.notes.append(f"Skipped: no LoCoMo data at {DATA}.")
        return section
    for label, settings_json in SETTINGS:
        results = measure(settings_json)
        f = figures(results)
        scored = f["grounded"][1]
        # Each score against all matched answers, its chance control beside it (a ratio
        # against a zero control would say nothing).
        for name, key in (("grounded", "grounded"), ("ungrounded", "ungrounded")):
            section.add(
                f"{name} answer in context ({label}, {scored} answers)",
                _pct(f[key]),
                "%",
                "matched answers",
                100.0,
            )
            section.add(
                f"{name}, chance control: another conversation's context ({label})",
                _pct(f[f"chance_{key}"]),
                "%",
                "matched answers",
                100.0,
            )
        section.add(
            f"evidence turns reachable ({label}, {f['evidence'][1]} turns)",
            _pct(f["evidence"]),
            "%",
            "evidence turns",
            100.0,
        )
        section.add(
            f"turns neither shown nor one recall away ({label})",
            f["out_of_reach"],
            "turns",
            "turns",
            f["turns"],
        )
        tokens = f["tokens"]
        section.add(
            f"context tokens ({label}, {len(results)} conversations)",
            tokens["context_tokens"],
            "tokens",
            "raw history tokens",
            tokens["raw_tokens"],
        )
        left = f["left_out"]
        section.notes.append(
            f"{label}: left out of the string match: {left['yes_no']} yes/no, "
            f"{left['small_number']} numbers ≤ 31, {left['long']} over five words, "
            f"{left['no_answer']} without a gold answer, {left['no_evidence']} without known "
            "evidence."
        )
    section.notes.append(
        "Sessions replayed as agent runs (speaker A user, speaker B assistant, image captions "
        "as text, a session-date line first), a flush after each; the context is "
        "build_context's at the service's default budget (every unobserved message shown). "
        "Grounded: the normalized gold answer (five words or fewer, yes/no and numbers ≤ 31 "
        "left out) occurs in the recent block's rendering of one of its evidence turns or in "
        "the text of a shown memory item citing one (a reflection through its supporting "
        "observations). Chance: conversation i's answers against conversation i+1's context "
        "(grounded: at the same evidence dia ids). Ungrounded: anywhere in the context. "
        "Reachable: shown in the recent block, or returned by one recall of a memory id the "
        "memory block shows or lists in its note (a message behind a paging cursor is not). "
        "Context tokens: both blocks as rendered; a run of observations of the same time "
        "writes its date once. See docs/evaluation.md."
    )
    return section
