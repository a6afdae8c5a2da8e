"""What counts as an answer, and the ungrounded and one-hop metrics, as pure functions.

**Answers scored.** A question's gold answer is string-matched only when it is informative:
:func:`answer_status` leaves out questions with no gold answer (``no_answer``, the adversarial
items), yes/no answers (``yes_no``: *yes*, *no*, *yeah*, *yep*, *nope*, optionally after a
hedge such as *likely* and followed by nothing or by punctuation, as in ``"Yes, she is"``;
any context "contains" them), bare numbers up to 31 (``small_number``: ``3``, ``two``; they
match day numbers, session numbers and counts anywhere) and answers longer than
:data:`MAX_ANSWER_WORDS` words after normalization (``long``: a paraphrase target, not a
string a memory could be expected to hold verbatim). Everything else is ``scored``.

**Answer in context, ungrounded** (:func:`answer_in_context`): the normalized answer occurs, on
word boundaries, in the normalized text of both context blocks. It says nothing about *why* the
string is there; :mod:`~om_api.evaluation.grounding` holds the grounded rule.

**Evidence one hop away** (:func:`evidence_one_hop`): every evidence turn is in a set of
reachable turns (see :mod:`~om_api.evaluation.grounding` for what is reachable).

**Judged runs** (:func:`spread`): with ``--answer --runs N`` each run's accuracy is judged
correct / judged questions; the report gives their mean, sample standard deviation, lowest
and highest.

Normalization (:func:`normalize`): lower case; dates in any of ``7 May 2023``, ``May 7, 2023``,
``7th of May, 2023``, ``2023-05-07`` become ``7 may 2023``; number words up to twenty become
digits; punctuation becomes space (apostrophes vanish, so ``Mel's`` is ``mels``); the articles
*a*, *an*, *the* go; whitespace collapses.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from om_core.read.render import MEMORY_REF_PATTERN
from om_core.read.render import memory_refs as core_memory_refs

MAX_ANSWER_WORDS = 5
MAX_EXCLUDED_NUMBER = 31
MEMORY_REF = MEMORY_REF_PATTERN

AnswerStatus = Literal["scored", "no_answer", "yes_no", "small_number", "long"]
EXCLUSIONS: tuple[AnswerStatus, ...] = ("no_answer", "yes_no", "small_number", "long")
"""The statuses of answers left out of the string match, in the order reports list them."""

_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_MONTH_OF = (
    {m: m for m in _MONTHS} | {m[:3]: m for m in _MONTHS if m != "may"} | {"sept": "september"}
)
_MONTH = r"(" + "|".join(sorted(_MONTH_OF, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH},?\s+(\d{{4}})\b")
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+(\d{{4}})\b")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]
_NUMBERS = {w: str(i) for i, w in enumerate(_NUMBER_WORDS)}
_NUMBER_WORD = re.compile(r"\b(" + "|".join(_NUMBERS) + r")\b")
_APOSTROPHE = re.compile(r"['’`]")
_PUNCT = re.compile(r"[^\w\s]|_")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_HEDGE = r"(?:(?:most\s+)?(?:likely|probably|possibly|maybe|perhaps|definitely|certainly))"
_YES_NO = re.compile(
    rf"^\W*(?:{_HEDGE}[\s,]+)?(?:yes|no|yeah|yep|nope|nah)\b\s*(?:$|[,.;:!?(\-–—])",
    re.IGNORECASE,
)


def _date(day: str, month: str, year: str) -> str:
    return f"{int(day)} {_MONTH_OF[month]} {year}"


def normalize(text: str) -> str:
    """The comparison form of an answer or a context (see the module docstring)."""
    out = text.lower()
    out = _ISO_DATE.sub(
        lambda m: (
            f"{int(m.group(3))} {_MONTHS[int(m.group(2)) - 1]} {m.group(1)}"
            if 1 <= int(m.group(2)) <= 12
            else m.group(0)
        ),
        out,
    )
    out = _DAY_MONTH_YEAR.sub(lambda m: _date(m.group(1), m.group(2), m.group(3)), out)
    out = _MONTH_DAY_YEAR.sub(lambda m: _date(m.group(2), m.group(1), m.group(3)), out)
    out = _NUMBER_WORD.sub(lambda m: _NUMBERS[m.group(1)], out)
    out = _APOSTROPHE.sub("", out)
    out = _PUNCT.sub(" ", out)
    out = _ARTICLES.sub(" ", out)
    return " ".join(out.split())


def is_yes_no(answer: str) -> bool:
    """Whether ``answer`` is a yes/no answer: ``yes``/``no`` (or *yeah*, *yep*, *nope*, *nah*),
    optionally after a hedge (*likely*, *probably* ...), then nothing or punctuation.
    ``"No kids"`` is not one; ``"Likely no; ..."`` and ``"Yes, she is"`` are."""
    return _YES_NO.match(answer.strip()) is not None


def is_small_number(normalized: str) -> bool:
    """Whether a normalized answer is a bare number up to :data:`MAX_EXCLUDED_NUMBER`."""
    return normalized.isdigit() and int(normalized) <= MAX_EXCLUDED_NUMBER


def answer_status(answer: str | None) -> AnswerStatus:
    """Why an answer is or is not string-matched (see the module docstring); the checks run
    in the order ``no_answer``, ``yes_no``, ``small_number``, ``long``."""
    if answer is None:
        return "no_answer"
    normal = normalize(answer)
    if not normal:
        return "no_answer"
    if is_yes_no(answer):
        return "yes_no"
    if is_small_number(normal):
        return "small_number"
    if len(normal.split()) > MAX_ANSWER_WORDS:
        return "long"
    return "scored"


def scorable_answer(answer: str | None) -> str | None:
    """The normalized answer when it is string-matched (status ``scored``), else None."""
    if answer is None or answer_status(answer) != "scored":
        return None
    return normalize(answer)


def contains(normalized_text: str, target: str) -> bool:
    """Whether normalized ``target`` occurs in ``normalized_text`` on word boundaries."""
    return f" {target} " in f" {normalized_text} "


def answer_in_context(answer: str | None, normalized_context: str) -> bool | None:
    """Ungrounded: whether the answer occurs anywhere in the (already normalized) context;
    None when the answer is not string-matched."""
    target = scorable_answer(answer)
    if target is None:
        return None
    return contains(normalized_context, target)


def memory_refs(memory_text: str) -> list[str]:
    """The memory ids (``om:<id>``, ``reflection:<id>``) a memory block shows or lists in a
    note, in order (:func:`om_core.read.render.memory_refs`)."""
    return core_memory_refs(memory_text)


def evidence_one_hop(evidence_entry_ids: Iterable[str], reachable: frozenset[str]) -> bool | None:
    """True when every evidence entry is reachable; None when the question has no evidence."""
    wanted = list(evidence_entry_ids)
    if not wanted:
        return None
    return all(i in reachable for i in wanted)


@dataclass(frozen=True)
class Spread:
    """Mean of per-run rates with their sample standard deviation (0 for one run), lowest
    and highest."""

    mean: float
    sd: float
    low: float
    high: float


def spread(rates: Sequence[float]) -> Spread | None:
    """The :class:`Spread` of ``rates`` (one per run); None for no runs."""
    if not rates:
        return None
    sd = statistics.stdev(rates) if len(rates) > 1 else 0.0
    return Spread(statistics.fmean(rates), sd, min(rates), max(rates))
