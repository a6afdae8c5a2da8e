"""The two retrieval metrics, as pure functions over text and ids.

* **answer in context**: the normalized gold answer occurs, on word boundaries, in the
  normalized text of the context blocks. Only short answers are scored (at most
  :data:`MAX_ANSWER_WORDS` words after normalization): a long free-text answer is a paraphrase
  target, not a string a memory could be expected to hold verbatim.
* **evidence one hop away**: every evidence turn is shown in the recent window, or is a direct
  source of a memory item (observation or reflection) whose id the memory block shows, so one
  recall of that id returns the turn.

Normalization (:func:`normalize`): lower case; dates in any of ``7 May 2023``, ``May 7, 2023``,
``7th of May, 2023``, ``2023-05-07`` become ``7 may 2023``; number words up to twenty become
digits; punctuation becomes space (apostrophes vanish, so ``Mel's`` is ``mels``); the articles
*a*, *an*, *the* go; whitespace collapses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

MAX_ANSWER_WORDS = 5
MEMORY_REF = re.compile(r"\[(om|reflection):([a-f0-9]{12})\]")

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


def scorable_answer(answer: str | None) -> str | None:
    """The normalized answer when it is scored (non-empty, at most five words), else None."""
    if answer is None:
        return None
    normal = normalize(answer)
    if not normal or len(normal.split()) > MAX_ANSWER_WORDS:
        return None
    return normal


def answer_in_context(answer: str | None, normalized_context: str) -> bool | None:
    """Whether the answer occurs in the (already normalized) context; None when unscored."""
    target = scorable_answer(answer)
    if target is None:
        return None
    return f" {target} " in f" {normalized_context} "


def memory_refs(memory_text: str) -> list[str]:
    """The memory ids (``om:<id>``, ``reflection:<id>``) shown in a memory block, in order."""
    return list(dict.fromkeys(f"{kind}:{mid}" for kind, mid in MEMORY_REF.findall(memory_text)))


@dataclass(frozen=True)
class Reach:
    """What one recall can reach from a context: entry ids shown verbatim in the recent window,
    and for each memory id shown, the entry ids it cites directly."""

    recent: frozenset[str]
    sources: Mapping[str, frozenset[str]]

    def reachable(self) -> frozenset[str]:
        """Every entry id in the window or cited by a shown memory id."""
        cited = frozenset(i for ids in self.sources.values() for i in ids)
        return self.recent | cited


def evidence_one_hop(evidence_entry_ids: Iterable[str], reachable: frozenset[str]) -> bool | None:
    """True when every evidence entry is reachable; None when the question has no evidence."""
    wanted = list(evidence_entry_ids)
    if not wanted:
        return None
    return all(i in reachable for i in wanted)
