"""Replay LoCoMo conversations through a memory target and score every question.

Replay: each LoCoMo session is one agent run in one memory session. The run starts with a
``user`` message ``[session N date: <date as written>]`` (entry id ``<session>.S<N>``), so the
date travels with the conversation through any target, the HTTP API included (which stamps its
own ``created_at``); in process, every entry of the run also gets the session date as
``created_at``. Then come the turns, speaker A as ``user`` and speaker B as ``assistant``, with
entry id ``<session>.<dia_id>`` so a question's evidence maps to entries. A flush follows each
run (``force`` observes below ``observation.messageTokens`` too).

After the last run the context blocks are read once and every question is scored against
them (see :mod:`om_api.evaluation.scoring`); with a :class:`ModelJudge` the model also answers
from that context and the judge grades the answer (questions with a gold answer only).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from om_api.evaluation.answering import ModelJudge
from om_api.evaluation.locomo import Conversation, Question, Session
from om_api.evaluation.scoring import (
    answer_in_context,
    evidence_one_hop,
    memory_refs,
    normalize,
)
from om_api.evaluation.targets import MemoryTarget, ReplayMessage
from om_core import Message, estimate_message_tokens
from om_core.tokens import estimate_text_tokens

_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._:-]")

Progress = Callable[[int, int], None]


def session_id_for(conversation: Conversation, tag: str = "") -> str:
    """``locomo-<name>[-<tag>]`` with characters an entry id may not hold replaced by ``-``."""
    raw = f"locomo-{conversation.name}" + (f"-{tag}" if tag else "")
    return _UNSAFE_ID.sub("-", raw)[:96]


def entry_id_for(session_id: str, dia_id: str) -> str:
    """The entry id of a turn: ``<session>.<dia_id>``."""
    return f"{session_id}.{dia_id}"


def run_messages(session_id: str, session: Session) -> list[ReplayMessage]:
    """One LoCoMo session as the messages of one agent run (see the module docstring)."""
    created = session.date.strftime("%Y-%m-%dT%H:%M:%SZ") if session.date else None
    date_line = f"[session {session.number} date: {session.date_text or 'unknown'}]"
    messages = [ReplayMessage(f"{session_id}.S{session.number}", "user", date_line, created)]
    messages += [
        ReplayMessage(entry_id_for(session_id, t.dia_id), t.role, t.text, created)
        for t in session.turns
        if t.text
    ]
    return messages


@dataclass
class QuestionResult:
    """One question's scores; ``None`` means not scored (see :mod:`scoring`)."""

    question: Question
    answer_in_context: bool | None
    evidence_one_hop: bool | None
    missing_evidence: tuple[str, ...]
    unknown_evidence: tuple[str, ...]
    judged: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON record of this question."""
        q = self.question
        return {
            "index": q.index,
            "category": q.category,
            "category_name": q.category_name,
            "question": q.question,
            "answer": q.answer,
            "evidence": list(q.evidence),
            "answer_scored": self.answer_in_context is not None,
            "answer_in_context": self.answer_in_context,
            "evidence_one_hop": self.evidence_one_hop,
            "missing_evidence": list(self.missing_evidence),
            "unknown_evidence": list(self.unknown_evidence),
            "judged": self.judged,
        }


@dataclass
class ConversationResult:
    """One conversation's token figures and question results."""

    name: str
    session_id: str
    sessions: int
    turns: int
    raw_tokens: int
    context_tokens: int
    memory_items_shown: int
    recent_messages_shown: int
    questions: list[QuestionResult] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """Context tokens / raw-history tokens (lower keeps less of the history verbatim)."""
        return self.context_tokens / self.raw_tokens if self.raw_tokens else 0.0

    def to_json(self) -> dict[str, Any]:
        """The JSON record of this conversation, questions included."""
        return {
            "name": self.name,
            "session_id": self.session_id,
            "sessions": self.sessions,
            "turns": self.turns,
            "raw_tokens": self.raw_tokens,
            "context_tokens": self.context_tokens,
            "ratio": round(self.ratio, 4),
            "memory_items_shown": self.memory_items_shown,
            "recent_messages_shown": self.recent_messages_shown,
            "questions": [q.to_json() for q in self.questions],
        }


def evaluate_conversation(
    conversation: Conversation,
    target: MemoryTarget,
    *,
    session_id: str,
    judge: ModelJudge | None = None,
    progress: Progress | None = None,
) -> ConversationResult:
    """Replay ``conversation`` into ``target`` under ``session_id`` and score its questions.

    ``progress(done, total)`` is called after each run (and once per judged question when
    ``judge`` is given, counted on after the runs). Target failures raise
    :class:`~om_api.evaluation.targets.EvalError`; provider failures of the judge propagate.
    """
    judged_questions = [q for q in conversation.questions if q.answer is not None] if judge else []
    total = len(conversation.sessions) + len(judged_questions)
    target.start(session_id)
    raw_tokens = turns = 0
    for done, session in enumerate(conversation.sessions, start=1):
        messages = run_messages(session_id, session)
        raw_tokens += sum(
            estimate_message_tokens(Message(role=m.role, content=m.text)) for m in messages
        )
        turns += len(session.turns)
        target.run(session_id, messages)
        if progress:
            progress(done, total)
    view = target.context(session_id)
    refs = memory_refs(view.memory_text)
    cited = target.sources(session_id, refs)
    reachable = view.recent_ids.union(*cited.values())
    context_text = f"{view.memory_text}\n\n{view.recent_text}".strip()
    normalized = normalize(context_text)
    result = ConversationResult(
        name=conversation.name,
        session_id=session_id,
        sessions=len(conversation.sessions),
        turns=turns,
        raw_tokens=raw_tokens,
        context_tokens=estimate_text_tokens(view.memory_text)
        + estimate_text_tokens(view.recent_text),
        memory_items_shown=len(refs),
        recent_messages_shown=len(view.recent_ids),
    )
    known = conversation.dia_ids
    for question in conversation.questions:
        unknown = tuple(e for e in question.evidence if e not in known)
        wanted = [entry_id_for(session_id, e) for e in question.evidence if e in known]
        result.questions.append(
            QuestionResult(
                question=question,
                answer_in_context=answer_in_context(question.answer, normalized),
                evidence_one_hop=evidence_one_hop(wanted, reachable),
                missing_evidence=tuple(
                    e
                    for e in question.evidence
                    if e in known and entry_id_for(session_id, e) not in reachable
                ),
                unknown_evidence=unknown,
            )
        )
    if judge is not None:
        by_index = {r.question.index: r for r in result.questions}
        for done, question in enumerate(judged_questions, start=len(conversation.sessions) + 1):
            by_index[question.index].judged = _judge(judge, conversation, question, context_text)
            if progress:
                progress(done, total)
    return result


def _judge(
    judge: ModelJudge, conversation: Conversation, question: Question, context: str
) -> dict[str, Any]:
    correlation = f"om:eval-{session_id_for(conversation)}-q{question.index}"
    generated = judge.answer(
        question.question,
        context,
        user=conversation.speaker_a,
        assistant=conversation.speaker_b,
        correlation=correlation,
    )
    verdict = judge.judge(
        question.question, question.answer or "", generated, correlation=correlation
    )
    return {"generated": generated, "correct": verdict.correct, "judge": verdict.judge_reply}


__all__ = [
    "ConversationResult",
    "QuestionResult",
    "entry_id_for",
    "evaluate_conversation",
    "run_messages",
    "session_id_for",
]
