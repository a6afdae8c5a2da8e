"""``--answer``: ask a model each question from the context alone, then judge its answer.

The judge prompt is the one the Mem0 LoCoMo evaluation published (generous CORRECT/WRONG
grading, dates accepted in any format), so rates compare with the published LoCoMo and
LongMemEval-style LLM-judge numbers. Both calls go through the same :class:`Provider` port the
memory workers use, with no tools offered; the model sees the two context blocks and nothing
else of the conversation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from om_api.evaluation.locomo import Conversation, Question
from om_core import Message
from om_core.flush.provider import Provider, ProviderRequest

JUDGED_CATEGORIES = frozenset({1, 2, 3, 4})
"""The categories answered and judged (the published protocol leaves adversarial, 5, out)."""

ANSWER_SYSTEM = """\
You are answering questions about a long conversation between {user} (the "user" role) and \
{assistant} (the "assistant" role), using only the memory context below: observations from \
earlier sessions (each with a recall id) and the most recent messages. Session dates appear as \
"[session N date: ...]" lines; resolve relative times ("last week", "yesterday") against the \
date of the session they were said in.

Answer with a short phrase (at most six words where possible). If the context does not \
contain the answer, say "not mentioned".

<context>
{context}
</context>"""

JUDGE_PROMPT = """\
Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. You will be given the \
following data:
    (1) a question (posed by one user to another user),
    (2) a 'gold' (ground truth) answer,
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user \
based on their prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, \
for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as \
long as it touches on the same topic as the gold answer, it should be counted as CORRECT.

For time related questions, the gold answer will be a specific date, month, year, etc. The \
generated answer might be much longer or use relative time references (like "last Tuesday" or \
"next month"), but you should be generous with your grading - as long as it refers to the same \
date or time period as the gold answer, it should be counted as CORRECT. Even if the format \
differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold}
Generated answer: {generated}

First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT \
or WRONG. Do NOT include both CORRECT and WRONG in your response, or it will break the parsing \
script.

Just return the label CORRECT or WRONG in a json format with the key as "label"."""

_LABEL_JSON = re.compile(r'"label"\s*:\s*"(CORRECT|WRONG)"', re.IGNORECASE)
_LABEL_WORD = re.compile(r"\b(CORRECT|WRONG)\b")


def parse_label(text: str) -> bool:
    """True for CORRECT. Reads ``{"label": ...}`` first, else the last bare CORRECT/WRONG;
    a reply naming neither counts as WRONG (an unparseable verdict earns no credit)."""
    found = _LABEL_JSON.findall(text)
    if found:
        return str(found[-1]).upper() == "CORRECT"
    words = _LABEL_WORD.findall(text)
    return bool(words) and str(words[-1]) == "CORRECT"


@dataclass(frozen=True)
class Judged:
    """A model answer and the judge's verdict on it."""

    generated: str
    correct: bool
    judge_reply: str


class ModelJudge:
    """Answers from context and judges the answer, two provider calls per question.

    Provider failures propagate (the HTTP adapters raise redacted ``ProviderError``s after
    their own retries); nothing is scored from a call that did not complete.
    """

    def __init__(self, provider: Provider, model: str, *, judge_model: str | None = None) -> None:
        self._provider = provider
        self._model = model
        self._judge_model = judge_model or model

    def answer(
        self, question: str, context: str, *, user: str, assistant: str, correlation: str
    ) -> str:
        """The model's answer to ``question`` from ``context`` alone (stripped text)."""
        system = ANSWER_SYSTEM.format(user=user, assistant=assistant, context=context)
        return self._ask(self._model, system, question, correlation)

    def judge(self, question: str, gold: str, generated: str, *, correlation: str) -> Judged:
        """The judge's CORRECT/WRONG on ``generated`` against ``gold``."""
        prompt = JUDGE_PROMPT.format(question=question, gold=gold, generated=generated)
        reply = self._ask(self._judge_model, None, prompt, correlation)
        return Judged(generated=generated, correct=parse_label(reply), judge_reply=reply)

    def _ask(self, model: str, system: str | None, user: str, correlation: str) -> str:
        messages = [Message(role="system", content=system)] if system else []
        messages.append(Message(role="user", content=user))
        request = ProviderRequest(
            messages=tuple(messages),
            model=model,
            options={"temperature": 0},
            correlation_id=correlation,
        )
        return self._provider.generate(request).message.text.strip()


def judge_runs(
    judge: ModelJudge,
    conversation: Conversation,
    question: Question,
    context: str,
    *,
    runs: int = 1,
    tag: str = "memory",
) -> list[dict[str, Any]]:
    """``runs`` independent answer-and-judge rounds of ``question`` from ``context``: one
    record (``generated``, ``correct``, ``judge`` reply) per run, in run order."""
    records: list[dict[str, Any]] = []
    for run in range(runs):
        correlation = f"om:eval-locomo-{conversation.name}-q{question.index}-{tag}-r{run + 1}"
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
        records.append(
            {"generated": generated, "correct": verdict.correct, "judge": verdict.judge_reply}
        )
    return records
