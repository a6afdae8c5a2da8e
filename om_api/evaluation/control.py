"""The chance control: a conversation's questions scored against another conversation's context.

Conversations are paired by rotation: the questions of conversation *i* (in report order) are
scored against the context of conversation *i + 1* (the last against the first); with fewer
than two conversations there is no control. The rules are the real ones, unchanged: the
grounded rule looks up the question's evidence dia ids (``D3:7``) in the other context, so it
asks whether the answer appears in what the other conversation shows for the same positions;
the ungrounded rule asks whether it appears anywhere in the other context. The questions
scored are exactly those scored against their own context, so the two figures compare.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from om_api.evaluation.grounding import grounded_answer, ungrounded_answer
from om_api.evaluation.runner import ConversationResult


@dataclass(frozen=True)
class Chance:
    """One question scored against another conversation's context (``None``: not scored)."""

    grounded: bool | None
    ungrounded: bool | None


def control_pairs(count: int) -> list[int | None]:
    """For each conversation position, the position whose context is its control."""
    if count < 2:
        return [None] * count
    return [(i + 1) % count for i in range(count)]


def chance_control(results: Sequence[ConversationResult]) -> list[list[Chance] | None]:
    """Per conversation (``None`` without a control), per question in order, its chance
    scores against the paired conversation's context."""
    out: list[list[Chance] | None] = []
    for result, other in zip(results, control_pairs(len(results)), strict=True):
        if other is None:
            out.append(None)
            continue
        shown = results[other].shown
        out.append(
            [
                Chance(
                    grounded_answer(q.question.answer, q.evidence, shown),
                    ungrounded_answer(q.question.answer, q.evidence, shown),
                )
                for q in result.questions
            ]
        )
    return out
