"""The pure part of search: parsing, snippets, cursors."""

from __future__ import annotations

import pytest

from om_core.errors import InvalidSearchQueryError
from om_core.read.search import SNIPPET_CHARS, SearchKey, decode_cursor, parse_query, snippet


def test_every_operator_is_a_separator() -> None:
    query = parse_query('NEAR("lease" * march:) AND (Lease OR __x__')
    assert query.terms == ("near", "lease", "march", "and", "or", "x")


def test_snippets_mark_whole_short_words_and_stem_like_prefixes() -> None:
    assert snippet("the cat can't stay", ["can", "t"]) == "the cat «can»'«t» stay"
    assert snippet("she studies leasing", ["study", "lease"]) == "she «studies» «leasing»"


def test_a_snippet_is_cut_around_the_first_match_on_word_edges() -> None:
    text = "word " * 200 + "needle " + "word " * 200
    shown = snippet(text, ["needle"])
    assert shown is not None and "«needle»" in shown
    assert shown.startswith("…") and shown.endswith("…")
    assert len(shown.replace("«", "").replace("»", "")) <= SNIPPET_CHARS + 2 + len("word")
    assert " wor…" not in shown and "…ord " not in shown


def test_an_unmarked_stem_match_shows_the_start_but_a_secret_only_match_is_dropped() -> None:
    assert snippet("a mouse here", ["mice"]) == "a mouse here"
    assert snippet("key sk-123456 here", ["123456"], ["sk-123456"]) is None
    assert snippet("key sk-123456 here", ["key"], ["sk-123456"]) == "«key» [REDACTED] here"


def test_cursors_round_trip_and_foreign_ones_are_refused() -> None:
    key = SearchKey(-1.2345678901234567e-06, 1, 42)
    assert decode_cursor(key.encode()) == key
    assert decode_cursor(None) is None
    for bad in ("%%%", "e30", "WzEsIDIsIDNd", "WyIwIiwgNSwgMV0"):
        with pytest.raises(InvalidSearchQueryError):
            decode_cursor(bad)
