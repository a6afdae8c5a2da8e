"""How text becomes index terms, and what a term weighs.

A text's words are its runs of letters and digits, lowercased, accents removed and reduced to
their Porter stems ("leasing" and "leases" are both ``leas``). Each distinct stem is one
*term* of the text, tagged with its *level*: the stem's BM25 weight in that text (its count
saturated by ``k1``, scaled by the text's length against :data:`TYPICAL_WORDS`), cut into
:data:`LEVELS` steps. A text's terms are written as ``stem_level`` (``leas_3``), one per stem,
so an index keyed by term holds, for each stem, its rows grouped by how much the stem weighs in
them; a row's score for a query is the sum over the query's stems of
``idf(stem) * weight(level)``, which the index can answer best rows first (see
:mod:`om_core.read.search_plan`).

Fixing the typical length (instead of the index's running average) is what lets a row's
levels be written once, with the row: BM25's length normalisation then compares a text with a
chat turn's length, whatever else the index holds.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

import snowballstemmer  # type: ignore[import-untyped]

K1 = 1.2
"""BM25's term-frequency saturation: a stem's weight in a text is below ``K1 + 1``."""
B = 0.75
"""BM25's length normalisation: how much a longer text's weight is lowered."""
TYPICAL_WORDS = 24
"""The text length (in words) a stem's weight is normalised against: about a chat turn."""
LEVELS = 8
"""Steps a stem's weight is cut into (a level is one digit of the term)."""

_WORD = re.compile(r"[^\W_]+")
# ASCII text (most of it) is split without the regular expression: every character but a
# letter or a digit becomes a space (the same words, in half the time).
_ASCII_SEPARATORS = str.maketrans(
    {chr(c): " " for c in range(128) if not chr(c).isalnum() and not chr(c).isspace()}
)
_STEMMER = snowballstemmer.stemmer("porter")


def _stem_of(word: str) -> str:
    if word.isascii() and word.isdigit():
        return word  # a number is its own stem (and often new: no need to ask the stemmer)
    if not word.isascii():
        word = "".join(
            c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c)
        )
    stem = str(_STEMMER.stemWord(word))
    # Index terms are ASCII, so that the index's tokenizer splits them exactly where this
    # module does; another stem is written as its UTF-8 in hex after an underscore (no ASCII
    # stem starts with one).
    return stem if stem.isascii() else "_" + stem.encode().hex()


class _Stems(dict[str, str]):
    """Words' stems, kept (a text's words are mostly known ones, and an index write looks
    each one up: a plain dict lookup, the stemmer only for a new word)."""

    LIMIT = 1 << 17

    def __missing__(self, word: str) -> str:
        if len(self) >= self.LIMIT:
            self.clear()
        stem = self[word] = _stem_of(word)
        return stem


_STEMS = _Stems()


def stems(text: str) -> list[str]:
    """The stems of ``text``'s words, in order (repeats kept; a word with no stem, as "s",
    left out)."""
    found = list(map(_STEMS.__getitem__, _words(text)))
    return [stem for stem in found if stem] if "" in found else found


def _words(text: str) -> list[str]:
    lowered = text.lower()
    if lowered.isascii():
        return lowered.translate(_ASCII_SEPARATORS).split()
    return _WORD.findall(lowered)


def query_stems(words: Sequence[str]) -> list[str]:
    """The distinct stems of a query's words, in order."""
    return list(dict.fromkeys(stem for word in words for stem in stems(word)))


@lru_cache(maxsize=1 << 14)
def level_of(count: int, words: int) -> int:
    """The level of a stem found ``count`` times in a text of ``words`` words."""
    norm = K1 * (1 - B + B * words / TYPICAL_WORDS)
    weight = count * (K1 + 1) / (count + norm)
    return min(LEVELS - 1, int(weight / (K1 + 1) * LEVELS))


def level_weight(level: int) -> float:
    """What a stem at ``level`` adds to a row's score, before its IDF: the middle of the
    level's step of BM25 weights."""
    return (level + 0.5) / LEVELS * (K1 + 1)


def term(stem: str, level: int) -> str:
    """The index term of ``stem`` at ``level``."""
    return f"{stem}_{level}"


def term_range(stem: str) -> tuple[str, str]:
    """The half-open range of index terms holding ``stem`` at any level (no other stem's
    terms fall in it: stems hold no underscore)."""
    return f"{stem}_", f"{stem}`"


_SUFFIXES = tuple(f"_{level}" for level in range(LEVELS))


def index_terms(text: str) -> str:
    """The index terms of ``text``, space-separated: each distinct stem once, at its level
    (what :func:`term` writes; run for every indexed row, so written out here)."""
    counts = Counter(map(_STEMS.__getitem__, _words(text)))
    counts.pop("", None)
    words = counts.total()
    once = _SUFFIXES[level_of(1, words)]
    if len(counts) == words:  # every stem there once: most texts, joined without a loop
        return f"{once} ".join(counts) + once if counts else ""
    return " ".join(
        [stem + (once if n == 1 else _SUFFIXES[level_of(n, words)]) for stem, n in counts.items()]
    )


def tenant_term(tenant_id: str) -> str:
    """The term every row of a tenant holds besides its text's (an underscore and the id's
    UTF-8 in hex: no text term has that shape), so a search can be narrowed to the tenant's
    rows inside the index."""
    return "_" + tenant_id.encode().hex()


def idf(rows: int, documents: int) -> float:
    """A stem's inverse document frequency among ``rows`` indexed rows, ``documents`` of which
    hold it (BM25's, kept positive: a stem in most rows weighs little, never nothing)."""
    return math.log(1 + (rows - documents + 0.5) / (documents + 0.5))
