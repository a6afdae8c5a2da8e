"""Aggregate question results by category and overall; render them as JSON and markdown."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from om_api.evaluation.locomo import CATEGORY_NAMES
from om_api.evaluation.runner import ConversationResult, QuestionResult


@dataclass
class Tally:
    """Counts for one group of questions; a rate is hits / scored (``None`` when none scored)."""

    questions: int = 0
    answer_scored: int = 0
    answer_hits: int = 0
    evidence_scored: int = 0
    evidence_hits: int = 0
    judged: int = 0
    judged_correct: int = 0

    def add(self, result: QuestionResult) -> None:
        """Count one question."""
        self.questions += 1
        if result.answer_in_context is not None:
            self.answer_scored += 1
            self.answer_hits += result.answer_in_context
        if result.evidence_one_hop is not None:
            self.evidence_scored += 1
            self.evidence_hits += result.evidence_one_hop
        if result.judged is not None:
            self.judged += 1
            self.judged_correct += bool(result.judged["correct"])

    @staticmethod
    def rate(hits: int, scored: int) -> float | None:
        return hits / scored if scored else None

    def to_json(self) -> dict[str, Any]:
        """Counts and the three rates."""
        return {
            "questions": self.questions,
            "answer_scored": self.answer_scored,
            "answer_in_context": self.answer_hits,
            "answer_in_context_rate": self.rate(self.answer_hits, self.answer_scored),
            "evidence_scored": self.evidence_scored,
            "evidence_one_hop": self.evidence_hits,
            "evidence_one_hop_rate": self.rate(self.evidence_hits, self.evidence_scored),
            "judged": self.judged,
            "judged_correct": self.judged_correct,
            "judge_accuracy": self.rate(self.judged_correct, self.judged),
        }


def _category_key(category: int) -> str:
    return CATEGORY_NAMES.get(category, f"category {category}")


def tally(results: Iterable[ConversationResult]) -> tuple[dict[str, Tally], Tally]:
    """Per-category tallies (in category-number order) and the overall one."""
    by_number: dict[int, Tally] = {}
    overall = Tally()
    for conversation in results:
        for question in conversation.questions:
            by_number.setdefault(question.question.category, Tally()).add(question)
            overall.add(question)
    return {_category_key(n): by_number[n] for n in sorted(by_number)}, overall


def compression(results: Sequence[ConversationResult]) -> dict[str, Any]:
    """Raw-history and context tokens summed over conversations, and their ratio."""
    raw = sum(r.raw_tokens for r in results)
    context = sum(r.context_tokens for r in results)
    return {"raw_tokens": raw, "context_tokens": context, "ratio": context / raw if raw else None}


def to_json(results: Sequence[ConversationResult], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The whole report: ``meta`` (mode, settings ...), totals, categories, conversations."""
    categories, overall = tally(results)
    return {
        "meta": dict(meta),
        "overall": overall.to_json(),
        "compression": compression(results),
        "by_category": {name: t.to_json() for name, t in categories.items()},
        "conversations": [r.to_json() for r in results],
    }


def _cell(hits: int, scored: int) -> str:
    return f"{hits}/{scored} ({hits / scored:.1%})" if scored else "-"


def to_markdown(results: Sequence[ConversationResult], *, judged: bool = False) -> str:
    """Two tables: questions by category (with an overall row), and tokens per conversation."""
    categories, overall = tally(results)
    head = "| category | questions | answer in context | evidence one hop |"
    rule = "| --- | ---: | ---: | ---: |"
    if judged:
        head, rule = head + " LLM judge |", rule + " ---: |"
    lines = [head, rule]
    for name, t in [*categories.items(), ("**overall**", overall)]:
        row = (
            f"| {name} | {t.questions} | {_cell(t.answer_hits, t.answer_scored)} | "
            f"{_cell(t.evidence_hits, t.evidence_scored)} |"
        )
        lines.append(row + (f" {_cell(t.judged_correct, t.judged)} |" if judged else ""))
    lines += [
        "",
        "| conversation | sessions | turns | raw-history tokens | context tokens | ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {r.sessions} | {r.turns} | {r.raw_tokens:,} | "
            f"{r.context_tokens:,} | {r.ratio:.3f} |"
        )
    total = compression(results)
    if len(results) > 1 and total["ratio"] is not None:
        lines.append(
            f"| **all** | {sum(r.sessions for r in results)} | {sum(r.turns for r in results)} | "
            f"{total['raw_tokens']:,} | {total['context_tokens']:,} | {total['ratio']:.3f} |"
        )
    return "\n".join(lines) + "\n"
