"""Aggregate question results by category number and overall; render them as JSON and markdown.

Every figure is a count over questions (or evidence turns) with its rate; the definitions are
in :mod:`~om_api.evaluation.scoring`, :mod:`~om_api.evaluation.grounding` and
:mod:`~om_api.evaluation.control`. Categories are keyed by LoCoMo's ``category`` number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from om_api.evaluation.control import Chance, chance_control, control_pairs
from om_api.evaluation.locomo import CATEGORY_NAMES
from om_api.evaluation.runner import BASELINES, ConversationResult, QuestionResult
from om_api.evaluation.scoring import EXCLUSIONS, MAX_ANSWER_WORDS, MAX_EXCLUDED_NUMBER, spread

LEFT_OUT = (*EXCLUSIONS, "no_evidence")
"""Why a question is not string-matched, in report order."""
LEFT_OUT_LABELS = {
    "no_answer": "no gold answer",
    "yes_no": "yes/no",
    "small_number": f"number ≤ {MAX_EXCLUDED_NUMBER}",
    "long": f"over {MAX_ANSWER_WORDS} words",
    "no_evidence": "no known evidence",
}


@dataclass
class Tally:
    """Counts for one group of questions; a rate is hits / scored (``None`` when none scored).

    ``judged_runs[r]`` counts the questions judged correct in run ``r``; ``baseline_runs``
    the same per baseline.
    """

    questions: int = 0
    left_out: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LEFT_OUT, 0))
    answer_scored: int = 0
    grounded: int = 0
    ungrounded: int = 0
    chance_scored: int = 0
    chance_grounded: int = 0
    chance_ungrounded: int = 0
    evidence_questions: int = 0
    evidence_all_reached: int = 0
    evidence_turns: int = 0
    evidence_turns_reached: int = 0
    judged: int = 0
    judged_runs: list[int] = field(default_factory=list)
    baseline_runs: dict[str, list[int]] = field(default_factory=dict)

    def add(self, result: QuestionResult, chance: Chance | None) -> None:
        """Count one question (``chance``: its control scores, ``None`` without a control)."""
        self.questions += 1
        status = result.match_status
        if status == "scored":
            self.answer_scored += 1
            self.grounded += bool(result.grounded)
            self.ungrounded += bool(result.answer_in_context)
        else:
            self.left_out[status] += 1
        if chance is not None and chance.grounded is not None:
            self.chance_scored += 1
            self.chance_grounded += chance.grounded
            self.chance_ungrounded += bool(chance.ungrounded)
        if result.evidence:
            self.evidence_questions += 1
            self.evidence_all_reached += bool(result.evidence_one_hop)
            self.evidence_turns += len(result.evidence)
            self.evidence_turns_reached += len(result.reached)
        if result.judged is not None:
            self.judged += 1
            _count_runs(self.judged_runs, result.judged)
            for name, runs in result.baselines.items():
                _count_runs(self.baseline_runs.setdefault(name, []), runs)

    @staticmethod
    def rate(hits: int, scored: int) -> float | None:
        """``hits / scored``, or ``None`` when nothing was scored."""
        return hits / scored if scored else None

    def judge_spread(self, runs: Sequence[int]) -> dict[str, float] | None:
        """Mean, sd, lowest and highest per-run accuracy of ``runs`` (correct counts)."""
        out = spread([c / self.judged for c in runs]) if self.judged else None
        return None if out is None else asdict(out)

    def to_json(self) -> dict[str, Any]:
        """Counts and rates."""
        return {
            "questions": self.questions,
            "left_out": dict(self.left_out),
            "answer_scored": self.answer_scored,
            "grounded": self.grounded,
            "grounded_rate": self.rate(self.grounded, self.answer_scored),
            "chance_scored": self.chance_scored,
            "chance_grounded": self.chance_grounded,
            "chance_grounded_rate": self.rate(self.chance_grounded, self.chance_scored),
            "ungrounded": self.ungrounded,
            "ungrounded_rate": self.rate(self.ungrounded, self.answer_scored),
            "chance_ungrounded": self.chance_ungrounded,
            "chance_ungrounded_rate": self.rate(self.chance_ungrounded, self.chance_scored),
            "evidence_questions": self.evidence_questions,
            "evidence_all_reachable": self.evidence_all_reached,
            "evidence_all_reachable_rate": self.rate(
                self.evidence_all_reached, self.evidence_questions
            ),
            "evidence_turns": self.evidence_turns,
            "evidence_turns_reachable": self.evidence_turns_reached,
            "evidence_turns_reachable_rate": self.rate(
                self.evidence_turns_reached, self.evidence_turns
            ),
            "judged": self.judged,
            "judged_correct_per_run": list(self.judged_runs),
            "judge_accuracy": self.judge_spread(self.judged_runs),
            "baselines": {
                name: {"correct_per_run": runs, "judge_accuracy": self.judge_spread(runs)}
                for name, runs in self.baseline_runs.items()
            },
        }


def _count_runs(counts: list[int], runs: Sequence[Mapping[str, Any]]) -> None:
    counts.extend([0] * (len(runs) - len(counts)))
    for index, run in enumerate(runs):
        counts[index] += bool(run["correct"])


def category_label(category: int) -> str:
    """``4 single-hop``: LoCoMo's number, then its name."""
    return f"{category} {CATEGORY_NAMES.get(category, 'unknown')}"


def tally(results: Sequence[ConversationResult]) -> tuple[dict[int, Tally], Tally]:
    """Per-category tallies (by category number, in order) and the overall one."""
    by_number: dict[int, Tally] = {}
    overall = Tally()
    controls = chance_control(results)
    for conversation, control in zip(results, controls, strict=True):
        for position, question in enumerate(conversation.questions):
            chance = control[position] if control is not None else None
            by_number.setdefault(question.question.category, Tally()).add(question, chance)
            overall.add(question, chance)
    return {n: by_number[n] for n in sorted(by_number)}, overall


def compression(results: Sequence[ConversationResult]) -> dict[str, Any]:
    """Raw-history and context tokens summed over conversations, and their ratio."""
    raw = sum(r.raw_tokens for r in results)
    context = sum(r.context_tokens for r in results)
    return {"raw_tokens": raw, "context_tokens": context, "ratio": context / raw if raw else None}


def reach(results: Sequence[ConversationResult]) -> dict[str, int]:
    """Turns over all conversations, and those neither shown nor one recall away."""
    return {
        "turns": sum(r.turns for r in results),
        "turns_out_of_reach": sum(len(r.out_of_reach) for r in results),
        "date_lines_out_of_reach": sum(r.date_lines_out_of_reach for r in results),
    }


def control_names(results: Sequence[ConversationResult]) -> list[str | None]:
    """For each conversation, the name of the conversation whose context is its control."""
    return [None if p is None else results[p].name for p in control_pairs(len(results))]


def to_json(results: Sequence[ConversationResult], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The whole report: ``meta`` (mode, settings ...), totals, categories, conversations
    (each question with its chance-control scores)."""
    categories, overall = tally(results)
    conversations = []
    controls = chance_control(results)
    for result, control, against in zip(results, controls, control_names(results), strict=True):
        record = result.to_json()
        record["chance_context"] = against
        for question, chance in zip(record["questions"], control or [], strict=False):
            question["chance"] = {"grounded": chance.grounded, "ungrounded": chance.ungrounded}
        conversations.append(record)
    return {
        "meta": dict(meta),
        "overall": overall.to_json(),
        "compression": compression(results),
        "reach": reach(results),
        "by_category": {
            str(n): {"name": CATEGORY_NAMES.get(n, "unknown"), **t.to_json()}
            for n, t in categories.items()
        },
        "conversations": conversations,
    }


def _cell(hits: int, scored: int) -> str:
    return f"{hits}/{scored} ({hits / scored:.1%})" if scored else "-"


def _spread_cell(t: Tally, runs: Sequence[int]) -> str:
    s = t.judge_spread(runs)
    if s is None:
        return "-"
    if len(runs) == 1:
        return f"{s['mean']:.1%} ({runs[0]}/{t.judged})"
    return f"{s['mean']:.1%} ± {s['sd']:.1%} ({s['low']:.1%}–{s['high']:.1%}, {len(runs)} runs)"


def to_markdown(results: Sequence[ConversationResult], *, judged: bool = False) -> str:
    """The report's tables: answers in context (grounded, chance control, ungrounded), what
    the string match left out, evidence reachability, judged answers (with ``judged``), and
    tokens and reach per conversation."""
    categories, overall = tally(results)
    rows = [(category_label(n), t) for n, t in categories.items()] + [("**overall**", overall)]
    lines = [
        "Answers in context: grounded = in the text shown for the question's own evidence "
        "turns; chance = the same rule against another conversation's context; ungrounded = "
        "anywhere in the context (for comparison).",
        "",
        "| category | questions | matched | grounded | grounded, chance | ungrounded | "
        "ungrounded, chance |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, t in rows:
        lines.append(
            f"| {name} | {t.questions} | {t.answer_scored} | {_cell(t.grounded, t.answer_scored)}"
            f" | {_cell(t.chance_grounded, t.chance_scored)} | "
            f"{_cell(t.ungrounded, t.answer_scored)} | "
            f"{_cell(t.chance_ungrounded, t.chance_scored)} |"
        )
    lines += [
        "",
        "| category | " + " | ".join(LEFT_OUT_LABELS[k] for k in LEFT_OUT) + " |",
        "| --- |" + " ---: |" * len(LEFT_OUT),
    ]
    for name, t in rows:
        lines.append(f"| {name} | " + " | ".join(str(t.left_out[k]) for k in LEFT_OUT) + " |")
    lines += [
        "",
        "| category | evidence turns reachable | questions with all evidence reachable |",
        "| --- | ---: | ---: |",
    ]
    for name, t in rows:
        lines.append(
            f"| {name} | {_cell(t.evidence_turns_reached, t.evidence_turns)} | "
            f"{_cell(t.evidence_all_reached, t.evidence_questions)} |"
        )
    if judged:
        names = ["memory", *BASELINES]
        lines += [
            "",
            "| category | judged | " + " | ".join(f"LLM judge, {n}" for n in names) + " |",
            "| --- | ---: |" + " ---: |" * len(names),
        ]
        for name, t in rows:
            cells = [_spread_cell(t, t.judged_runs)]
            cells += [_spread_cell(t, t.baseline_runs.get(b, [])) for b in BASELINES]
            lines.append(f"| {name} | {t.judged} | " + " | ".join(cells) + " |")
    lines += _conversation_table(results)
    return "\n".join(lines) + "\n"


def _conversation_table(results: Sequence[ConversationResult]) -> list[str]:
    lines = [
        "",
        "| conversation | sessions | turns | raw tokens | context tokens | ratio | memory items "
        "| recent messages | unobserved | gap | turns out of reach | chance context |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r, against in zip(results, control_names(results), strict=True):
        lines.append(
            f"| {r.name} | {r.sessions} | {r.turns} | {r.raw_tokens:,} | {r.context_tokens:,} | "
            f"{r.ratio:.3f} | {r.memory_items_shown} | {r.recent_messages_shown} | "
            f"{r.unobserved_messages} | {r.gap_messages} | {len(r.out_of_reach)} | "
            f"{against or '-'} |"
        )
    total = compression(results)
    if len(results) > 1 and total["ratio"] is not None:
        lines.append(
            f"| **all** | {sum(r.sessions for r in results)} | {sum(r.turns for r in results)} | "
            f"{total['raw_tokens']:,} | {total['context_tokens']:,} | {total['ratio']:.3f} | "
            f"{sum(r.memory_items_shown for r in results)} | "
            f"{sum(r.recent_messages_shown for r in results)} | "
            f"{sum(r.unobserved_messages for r in results)} | "
            f"{sum(r.gap_messages for r in results)} | "
            f"{sum(len(r.out_of_reach) for r in results)} | |"
        )
    return lines
