"""Replay LoCoMo conversations through a memory target and score every question.

Replay: each LoCoMo session is one agent run in one memory session. The run starts with a
``user`` message ``[session N date: <date as written>]`` (entry id ``<session>.S<N>``), so the
date travels with the conversation through any target, the HTTP API included (which stamps its
own ``created_at``); in process, every entry of the run also gets the session date as
``created_at``. Then come the turns, speaker A as ``user`` and speaker B as ``assistant``, with
entry id ``<session>.<dia_id>`` so a question's evidence maps to entries. A flush follows each
run (``force`` observes below ``observation.messageTokens`` too).

After the last run the context is read once, taken apart per turn
(:class:`~om_api.evaluation.grounding.ShownContext`, keyed by dia id, with one recall per
memory id shown) and every question is scored against it (definitions in
:mod:`~om_api.evaluation.scoring` and :mod:`~om_api.evaluation.grounding`). With a
:class:`ModelJudge` the model also answers questions of categories 1-4 with a gold answer
from that context, ``runs`` times each, and the judge grades every answer; ``baselines`` adds
the same protocol on the full transcript and on no context at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from om_api.evaluation.answering import JUDGED_CATEGORIES, ModelJudge, judge_runs
from om_api.evaluation.grounding import (
    Recalled,
    ShownContext,
    grounded_answer,
    out_of_reach,
    reached,
    shown_context,
    ungrounded_answer,
)
from om_api.evaluation.locomo import Conversation, Question, Session
from om_api.evaluation.scoring import AnswerStatus, answer_status, memory_refs
from om_api.evaluation.targets import ContextView, MemoryTarget, ReplayMessage
from om_core import Message, estimate_message_tokens
from om_core.ledger.tokens import estimate_text_tokens
from om_core.read.window import render_message

_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._:-]")

Progress = Callable[[int, int], None]
BASELINES = ("full-transcript", "no-memory")
"""The judged baselines: the whole replayed transcript as context, and an empty context."""


def session_id_for(conversation: Conversation, tag: str = "") -> str:
    """``locomo-<name>[-<tag>]`` with characters an entry id may not hold replaced by ``-``."""
    raw = f"locomo-{conversation.name}" + (f"-{tag}" if tag else "")
    return _UNSAFE_ID.sub("-", raw)[:96]


def entry_id_for(session_id: str, dia_id: str) -> str:
    """The entry id of a turn: ``<session>.<dia_id>``."""
    return f"{session_id}.{dia_id}"


def turn_key(session_id: str, entry_id: str) -> str:
    """The replay's own id of an entry: its dia id, or ``S<N>`` for a session-date line."""
    return entry_id.removeprefix(f"{session_id}.")


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


def rendered(message: ReplayMessage) -> str:
    """How the recent block renders a replayed message (``[role] text``)."""
    return render_message(Message(role=message.role, content=message.text))


@dataclass
class QuestionResult:
    """One question's scores; ``None`` means not scored (see :mod:`scoring`, :mod:`grounding`).

    ``evidence`` holds the known evidence dia ids (deduplicated), ``reached`` those shown or
    one recall away; ``judged`` one record per run, ``baselines`` the same per baseline.
    """

    question: Question
    answer_status: AnswerStatus
    grounded: bool | None
    answer_in_context: bool | None
    evidence: tuple[str, ...]
    reached: tuple[str, ...]
    unknown_evidence: tuple[str, ...]
    judged: list[dict[str, Any]] | None = None
    baselines: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def match_status(self) -> str:
        """``scored`` when string-matched; else why not: an :data:`AnswerStatus` exclusion or
        ``no_evidence`` (a scorable answer without a known evidence turn to ground it)."""
        if self.answer_status != "scored":
            return self.answer_status
        return "scored" if self.evidence else "no_evidence"

    @property
    def evidence_one_hop(self) -> bool | None:
        """Every known evidence turn reachable; None without known evidence."""
        return len(self.reached) == len(self.evidence) if self.evidence else None

    @property
    def missing_evidence(self) -> tuple[str, ...]:
        """Known evidence turns neither shown nor one recall away."""
        return tuple(e for e in self.evidence if e not in self.reached)

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
            "match_status": self.match_status,
            "grounded": self.grounded,
            "answer_in_context": self.answer_in_context,
            "evidence_reached": list(self.reached),
            "evidence_one_hop": self.evidence_one_hop,
            "missing_evidence": list(self.missing_evidence),
            "unknown_evidence": list(self.unknown_evidence),
            "judged": self.judged,
            "baselines": self.baselines or None,
        }


@dataclass
class ConversationResult:
    """One conversation's context figures, its context taken apart, and its question results.

    ``out_of_reach`` lists the turns (dia ids) neither shown nor one recall away;
    ``date_lines_out_of_reach`` counts the session-date lines in the same state.
    """

    name: str
    session_id: str
    sessions: int
    turns: int
    raw_tokens: int
    context_tokens: int
    memory_items_shown: int
    recent_messages_shown: int
    unobserved_messages: int
    unobserved_tokens: int
    gap_messages: int
    gap_tokens: int
    out_of_reach: tuple[str, ...]
    date_lines_out_of_reach: int
    shown: ShownContext
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
            "unobserved": {"messages": self.unobserved_messages, "tokens": self.unobserved_tokens},
            "gap": {"messages": self.gap_messages, "tokens": self.gap_tokens},
            "turns_out_of_reach": len(self.out_of_reach),
            "out_of_reach": list(self.out_of_reach),
            "date_lines_out_of_reach": self.date_lines_out_of_reach,
            "questions": [q.to_json() for q in self.questions],
        }


def score_question(
    question: Question, known: frozenset[str], shown: ShownContext
) -> QuestionResult:
    """One question scored against a context (``known``: the conversation's dia ids)."""
    evidence = tuple(dict.fromkeys(e for e in question.evidence if e in known))
    return QuestionResult(
        question=question,
        answer_status=answer_status(question.answer),
        grounded=grounded_answer(question.answer, evidence, shown),
        answer_in_context=ungrounded_answer(question.answer, evidence, shown),
        evidence=evidence,
        reached=reached(evidence, shown),
        unknown_evidence=tuple(e for e in question.evidence if e not in known),
    )


def evaluate_conversation(
    conversation: Conversation,
    target: MemoryTarget,
    *,
    session_id: str,
    judge: ModelJudge | None = None,
    runs: int = 1,
    baselines: bool = False,
    progress: Progress | None = None,
) -> ConversationResult:
    """Replay ``conversation`` into ``target`` under ``session_id`` and score its questions.

    ``progress(done, total)`` is called after each run (and once per judged question when
    ``judge`` is given, counted on after the runs). Target failures raise
    :class:`~om_api.evaluation.targets.EvalError`; provider failures of the judge propagate.
    """
    judged = judged_questions(conversation) if judge else []
    tick = _ticker(progress, len(conversation.sessions) + len(judged))
    replay = _replay(conversation, target, session_id, tick)
    view = target.context(session_id)
    refs = memory_refs(view.memory_text)
    shown = _shown(view, target.sources(session_id, refs), replay.messages, session_id)
    result = _result(conversation, session_id, replay, view, len(refs), shown)
    if judge is not None:
        contexts = _judged_contexts(view, replay.messages, baselines)
        _judge_questions(judge, conversation, judged, result, contexts, runs, tick)
    return result


def _ticker(progress: Progress | None, total: int) -> Callable[[int], None]:
    """``progress`` with its total filled in (nothing when there is none)."""
    return (lambda done: progress(done, total)) if progress else (lambda done: None)


@dataclass(frozen=True)
class _Replay:
    """What a conversation's replay sent: its messages in order, their estimated tokens as raw
    history, and the number of LoCoMo turns."""

    messages: list[ReplayMessage]
    raw_tokens: int
    turns: int


def _replay(
    conversation: Conversation, target: MemoryTarget, session_id: str, tick: Callable[[int], None]
) -> _Replay:
    """Each LoCoMo session as one run of ``target`` (see the module docstring)."""
    target.start(session_id)
    raw_tokens = turns = 0
    replayed: list[ReplayMessage] = []
    for done, session in enumerate(conversation.sessions, start=1):
        messages = run_messages(session_id, session)
        replayed += messages
        raw_tokens += sum(
            estimate_message_tokens(Message(role=m.role, content=m.text)) for m in messages
        )
        turns += len(session.turns)
        target.run(session_id, messages)
        tick(done)
    return _Replay(replayed, raw_tokens, turns)


def _shown(
    view: ContextView,
    recalled: dict[str, Recalled],
    replayed: Sequence[ReplayMessage],
    session_id: str,
) -> ShownContext:
    """The context taken apart per turn: the recent block's messages as replayed, and each
    memory id's recall."""
    by_id = {m.entry_id: m for m in replayed}
    recent = [
        (turn_key(session_id, i), rendered(by_id[i]) if i in by_id else "") for i in view.recent_ids
    ]
    return shown_context(
        view.memory_text,
        view.recent_text,
        recent,
        {ref: _keyed(session_id, r) for ref, r in recalled.items()},
    )


def _result(
    conversation: Conversation,
    session_id: str,
    replay: _Replay,
    view: ContextView,
    memory_items: int,
    shown: ShownContext,
) -> ConversationResult:
    """The conversation's scores: what the context holds and reaches, and each question."""
    keys = [turn_key(session_id, m.entry_id) for m in replay.messages]
    known = conversation.dia_ids
    return ConversationResult(
        name=conversation.name,
        session_id=session_id,
        sessions=len(conversation.sessions),
        turns=replay.turns,
        raw_tokens=replay.raw_tokens,
        context_tokens=estimate_text_tokens(view.memory_text)
        + estimate_text_tokens(view.recent_text),
        memory_items_shown=memory_items,
        recent_messages_shown=len(view.recent_ids),
        unobserved_messages=view.unobserved_messages,
        unobserved_tokens=view.unobserved_tokens,
        gap_messages=view.gap_messages,
        gap_tokens=view.gap_tokens,
        out_of_reach=out_of_reach([k for k in keys if k in known], shown),
        date_lines_out_of_reach=len(out_of_reach([k for k in keys if k not in known], shown)),
        shown=shown,
        questions=[score_question(q, known, shown) for q in conversation.questions],
    )


def _judged_contexts(
    view: ContextView, replayed: Sequence[ReplayMessage], baselines: bool
) -> dict[str, str]:
    """The contexts the model answers from, by name: memory, and with ``baselines`` the full
    transcript and nothing."""
    contexts = {"memory": f"{view.memory_text}\n\n{view.recent_text}".strip()}
    if baselines:
        contexts |= {"full-transcript": transcript(replayed), "no-memory": ""}
    return contexts


def _judge_questions(
    judge: ModelJudge,
    conversation: Conversation,
    judged: Sequence[Question],
    result: ConversationResult,
    contexts: dict[str, str],
    runs: int,
    tick: Callable[[int], None],
) -> None:
    """Each judged question answered from each context ``runs`` times, into ``result``'s
    records; ``tick`` counts on after the conversation's runs."""
    by_index = {r.question.index: r for r in result.questions}
    for done, question in enumerate(judged, start=len(conversation.sessions) + 1):
        record = by_index[question.index]
        for name, text in contexts.items():
            out = judge_runs(judge, conversation, question, text, runs=runs, tag=name)
            if name == "memory":
                record.judged = out
            else:
                record.baselines[name] = out
        tick(done)


def judged_questions(conversation: Conversation) -> list[Question]:
    """The questions the model answers: categories 1-4 with a gold answer."""
    return [
        q
        for q in conversation.questions
        if q.answer is not None and q.category in JUDGED_CATEGORIES
    ]


def transcript(messages: Sequence[ReplayMessage]) -> str:
    """The full-transcript baseline's context: every replayed message as the recent block
    renders it, session-date lines included."""
    return "\n".join(rendered(m) for m in messages)


def _keyed(session_id: str, recalled: Recalled) -> Recalled:
    return Recalled(
        frozenset(turn_key(session_id, i) for i in recalled.cites),
        frozenset(turn_key(session_id, i) for i in recalled.returns),
    )


__all__ = [
    "BASELINES",
    "ConversationResult",
    "QuestionResult",
    "entry_id_for",
    "evaluate_conversation",
    "judged_questions",
    "run_messages",
    "score_question",
    "session_id_for",
    "transcript",
    "turn_key",
]
