"""Full-text search, the pure part: what a query means, how a hit is shown, how pages chain.

A query is a bag of words: every run of letters and digits is one term, and anything else
(quotes, ``*``, ``:``, parentheses, ``AND``/``OR``/``NOT``/``NEAR``) is only a separator, so
no input is ever engine syntax. A hit matches any term; hits are ranked by the engine's
relevance score (BM25 weights in levels over the query's rarest stems, on either store, see
:mod:`om_core.read.search_plan`), best first, ties broken by a fixed key so pages never
overlap.

A snippet is cut from the text *after* secrets are redacted, so it never holds a secret or a
piece of one; a hit whose only matches were inside a secret is dropped (the search would
otherwise confirm where a secret was said).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from om_core.errors import InvalidSearchQueryError
from om_core.policy.redaction import redact

MAX_QUERY_CHARS = 500
"""Longest query accepted, in characters (a longer one is an :class:`InvalidSearchQueryError`)."""
MAX_QUERY_TERMS = 32
"""Most distinct terms a query keeps; later ones are ignored (ranking barely changes)."""
MAX_SEARCH_LIMIT = 100
"""Most hits one page returns."""
SNIPPET_CHARS = 240
"""Longest snippet, in characters, markers and ellipses excluded."""
MARK_OPEN = "«"
MARK_CLOSE = "»"

HitKind = Literal["message", "observation", "reflection"]

_WORD = re.compile(r"\w+", re.UNICODE)
# A term matches a word that starts with the term's stem-like prefix: close to what the
# engines' stemmers match, used only to place and mark the snippet.
_MIN_PREFIX = 3


@dataclass(frozen=True)
class SearchQuery:
    """A parsed query: its distinct lowercase terms, in the order given."""

    terms: tuple[str, ...]

    def text(self) -> str:
        """The terms as plain words, for PostgreSQL's ``plainto_tsquery``."""
        return " ".join(self.terms)


def parse_query(q: str | None) -> SearchQuery:
    """Parse a search query. Raises :class:`InvalidSearchQueryError` when ``q`` is missing,
    longer than :data:`MAX_QUERY_CHARS`, or holds no letter or digit."""
    if q is None or not q.strip():
        raise InvalidSearchQueryError("the search query is empty")
    if len(q) > MAX_QUERY_CHARS:
        raise InvalidSearchQueryError(
            f"the search query is {len(q)} characters long; at most {MAX_QUERY_CHARS} are allowed"
        )
    terms: list[str] = []
    for word in _WORD.findall(q.lower()):
        word = word.strip("_")
        if word and word not in terms:
            terms.append(word)
    if not terms:
        raise InvalidSearchQueryError("the search query holds no word to search for")
    return SearchQuery(tuple(terms[:MAX_QUERY_TERMS]))


def check_limit(limit: int) -> int:
    """``limit`` when within ``1..MAX_SEARCH_LIMIT``, else :class:`InvalidSearchQueryError`."""
    if not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise InvalidSearchQueryError(f"limit must be between 1 and {MAX_SEARCH_LIMIT}")
    return limit


@dataclass(frozen=True, order=True)
class SearchKey:
    """A hit's place in the order: ``rank`` ascending (the negated score: best first), then
    the source (``0`` messages, ``1`` memory) and its row number."""

    rank: float
    source: int
    row: int

    def encode(self) -> str:
        """The opaque cursor of the page after this hit."""
        raw = json.dumps([repr(self.rank), self.source, self.row]).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> SearchKey | None:
    """The key a cursor names (``None``: the first page). Raises
    :class:`InvalidSearchQueryError` for a cursor no search returned."""
    if cursor is None or cursor == "":
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        rank, source, row = json.loads(raw)
        key = SearchKey(float(rank), int(source), int(row))
    except (ValueError, TypeError, binascii.Error, json.JSONDecodeError):
        raise InvalidSearchQueryError("the cursor is not one a search returned") from None
    if key.source not in (0, 1) or key.rank != key.rank:
        raise InvalidSearchQueryError("the cursor is not one a search returned")
    return key


@dataclass(frozen=True)
class SearchHit:
    """One hit: an entry id (``kind`` ``message``) or a memory id, its session, a snippet with
    the matches between :data:`MARK_OPEN` and :data:`MARK_CLOSE`, the engine's score (higher
    is better, comparable within one search only), the time (ISO 8601, entries only) and, for
    memory, the ids it rests on (entry ids for an observation, observation ids for a
    reflection)."""

    id: str
    session_id: str
    kind: HitKind
    snippet: str
    score: float
    created_at: str | None
    source_ids: tuple[str, ...] | None


@dataclass(frozen=True)
class SearchPage:
    """One page of hits and the cursor of the next (``None``: the last page). A page may hold
    fewer than ``limit`` hits when withheld or secret-only matches were left out of it."""

    hits: tuple[SearchHit, ...]
    next_cursor: str | None


def _matches(text: str, terms: Sequence[str]) -> list[tuple[int, int]]:
    # A term under three letters marks only itself ("t" of "can't" is not "the"); a longer
    # one its stem-like prefix, so "leasing" marks "lease" and "studies" "study".
    whole = {t for t in terms if len(t) < _MIN_PREFIX}
    prefixes = tuple(t[: max(_MIN_PREFIX, len(t) - 3)] for t in terms if len(t) >= _MIN_PREFIX)
    spans: list[tuple[int, int]] = []
    for m in _WORD.finditer(text):
        word = m.group().lower()
        if word in whole or (prefixes and word.startswith(prefixes)):
            spans.append((m.start(), m.end()))
    return spans


def snippet(text: str, terms: Sequence[str], secrets: Iterable[str] = ()) -> str | None:
    """A window of at most :data:`SNIPPET_CHARS` of ``text`` (secrets redacted first) around
    its first marked match (the start when the engine's stemmer matched a form not marked
    here); ``None`` when redaction removed a secret and no match is left, so the hit matched
    inside the secret."""
    clean = redact(text, secrets)
    spans = _matches(clean, terms)
    if not spans and clean != text:
        return None
    first = spans[0][0] if spans else 0
    start = max(0, first - SNIPPET_CHARS // 3)
    end = min(len(clean), start + SNIPPET_CHARS)
    start = max(0, min(start, end - SNIPPET_CHARS))
    # Never cut a word in two at either edge.
    while start > 0 and clean[start - 1].isalnum():
        start -= 1
    while end < len(clean) and clean[end].isalnum():
        end += 1
    parts: list[str] = ["…" if start > 0 else ""]
    at = start
    for s, e in spans:
        if s < start or e > end:
            continue
        parts.extend((clean[at:s], MARK_OPEN, clean[s:e], MARK_CLOSE))
        at = e
    parts.append(clean[at:end])
    parts.append("…" if end < len(clean) else "")
    return "".join(parts)
