"""Search terms: how text becomes levelled stems, and the order an index answers them in."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from snowballstemmer.porter_stemmer import PorterStemmer  # type: ignore[import-untyped]

from om_core.read import search_terms
from om_core.read.search import SearchKey
from om_core.read.search_plan import (
    FTS5,
    TSQUERY,
    Combination,
    EmptySets,
    PlanWord,
    best_keys,
    combinations,
    held_at,
    read_places,
    rows_held,
    score,
)
from om_core.read.search_terms import (
    LEVELS,
    idf,
    index_terms,
    level_of,
    level_weight,
    stems,
    tenant_term,
    term,
    term_range,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Leasing the LEASES", ["leas", "the", "leas"]),
        ("café naïve", ["cafe", "naiv"]),
        ("snake_case it's", ["snake", "case", "it"]),  # "s" has no stem
        ("2024-03 v2", ["2024", "03", "v2"]),
        ("данные", ["_" + "данные".encode().hex()]),
        ("x² ٣ 2024", ["x2", "_" + "٣".encode().hex(), "2024"]),
        ("", []),
    ],
)
def test_stems_are_lowercase_porter_stems_of_words(text: str, expected: list[str]) -> None:
    assert stems(text) == expected


def _stemmer_sample() -> list[str]:
    """Every word of the docs, and suffixed made-up words that walk the Porter rules' steps."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    words = {w for f in docs.glob("*.md") for w in search_terms._words(f.read_text("utf-8"))}
    rng = random.Random(7)
    suffixes = ("", "s", "es", "ies", "sses", "ed", "eed", "ing", "ly", "y", "e", "ational",
                "tional", "ization", "fulness", "ousness", "iveness", "ement", "ence", "able",
                "ism", "ate", "iti", "biliti", "alli", "entli", "ousli", "ator", "ion")  # fmt: skip
    for _ in range(20_000):
        root = "".join(rng.choice("bcdfghlmnprstvwaeiouy") for _ in range(rng.randint(1, 9)))
        words.add(root + rng.choice(suffixes))
    return sorted(words)


def test_the_c_stemmer_gives_the_pure_python_stems() -> None:
    # The server's install has PyStemmer, which snowballstemmer then uses in place of its own
    # pure-Python stemmers; an index written without it must be searchable with it.
    c_stemmer = pytest.importorskip("Stemmer", reason="PyStemmer is not installed").Stemmer
    assert type(search_terms._STEMMER) is c_stemmer
    python = PorterStemmer()
    words = _stemmer_sample()
    differ = [w for w in words if search_terms._STEMMER.stemWord(w) != python.stemWord(w)]
    assert len(words) > 20_000
    assert differ == []


@given(st.text(max_size=60))
def test_ascii_text_is_split_as_any_text_is(text: str) -> None:
    ascii_text = text.encode("ascii", "ignore").decode()
    for sample in (text, ascii_text):
        assert search_terms._words(sample) == search_terms._WORD.findall(sample.lower())


@pytest.mark.parametrize(
    ("count", "words", "level"),
    [(1, 24, 3), (2, 24, 5), (3, 24, 5), (10, 24, 7), (1, 3, 5), (1, 240, 0), (1, 48, 2)],
)
def test_levels_follow_bm25_weights(count: int, words: int, level: int) -> None:
    assert level_of(count, words) == level


@given(st.integers(1, 50), st.integers(1, 2_000))
def test_a_level_grows_with_the_count_and_falls_with_the_length(count: int, words: int) -> None:
    words = max(words, count)
    level = level_of(count, words)
    assert 0 <= level < LEVELS
    assert level_of(count + 1, words + 1) >= level
    assert level_of(count, words + 100) <= level
    assert level_weight(level) < level_weight(level + 1)


def test_a_text_holds_each_stem_once_at_its_level() -> None:
    assert index_terms("lease lease march a very long tail of words here") == (
        "leas_5 march_4 a_4 veri_4 long_4 tail_4 of_4 word_4 here_4"
    )
    assert index_terms("") == ""


@given(st.text(max_size=40), st.text(max_size=40), st.text(min_size=1, max_size=20))
def test_terms_of_other_stems_and_tenants_never_fall_in_a_stems_range(
    first: str, second: str, tenant: str
) -> None:
    for a, b in itertools.product(stems(first), stems(second)):
        lo, hi = term_range(a)
        for level in range(LEVELS):
            t = term(b, level)
            assert t.isascii() and " " not in t
            assert (lo <= t < hi) == (a == b)
        assert not lo <= tenant_term(tenant) < hi


def test_idf_is_positive_and_falls_with_documents() -> None:
    assert idf(1_000, 1) > idf(1_000, 10) > idf(1_000, 999) > 0


def _words(*levels: tuple[int, ...]) -> list[PlanWord]:
    return [PlanWord(f"s{n}", 1.0 + n / 3, held) for n, held in enumerate(levels)]


def test_combinations_come_best_first_each_once() -> None:
    words = _words((3, 5), (0, 2, 7), (4,))
    groups = list(combinations(words))
    flat = [c for group in groups for c in group]
    # Every assignment of a level or none to each word, but "none of them".
    assert len(flat) == 3 * 4 * 2 - 1
    assert len({c.held for c in flat}) == len(flat)
    scores = [group[0].score for group in groups]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)
    for group in groups:
        assert {c.score for c in group} == {group[0].score}
    best = flat[0]
    assert best.held == ("s0_5", "s1_7", "s2_4") and best.lacking == ()
    assert best.score == score(words, {0: 5, 1: 7, 2: 4})


def test_equal_scores_form_one_group() -> None:
    twins = [PlanWord("a", 2.0, (3,)), PlanWord("b", 2.0, (3,))]
    groups = list(combinations(twins))
    assert [len(g) for g in groups] == [1, 2]
    assert {c.held for c in groups[1]} == {("a_3",), ("b_3",)}


def test_a_combinations_match_names_its_rows() -> None:
    both = Combination(1.0, ("a_3", "b_5"), ("c_1", "c_2"), (0, 1))
    assert both.match(FTS5) == '("a_3" AND "b_5") NOT ("c_1" OR "c_2")'
    assert both.match(FTS5, ("d_0",)) == '("a_3" AND "b_5") NOT ("c_1" OR "c_2" OR "d_0")'
    assert Combination(1.0, ("a_3",), (), (0,)).match(FTS5) == '"a_3"'
    assert both.match(TSQUERY) == "('a_3' & 'b_5') & !('c_1' | 'c_2')"


def test_a_tsquery_lexeme_is_never_syntax() -> None:
    assert TSQUERY.quote("it's") == "'it''s'"
    assert TSQUERY.quote("c:\\x") == "'c:\\\\x'"
    assert TSQUERY.any_of(["a | b", "!c"]) == "'a | b' | '!c'"


@pytest.mark.parametrize(
    ("budget", "read"),
    [
        (0, [(1, 7)]),  # a level counted nowhere costs nothing to read
        (10, [(0, 5), (1, 5), (1, 7)]),
        (509, [(0, 5), (1, 5), (1, 7)]),
        (510, [(0, 3), (0, 5), (1, 5), (1, 7)]),
        (10**9, [(0, 3), (0, 5), (1, 3), (1, 5), (1, 7)]),
    ],
)
def test_the_rarest_places_are_read_within_the_budget(
    budget: float, read: list[tuple[int, int]]
) -> None:
    words = [PlanWord("a", 3.0, (3, 5)), PlanWord("b", 1.0, (3, 5, 7))]
    documents = [{3: 500, 5: 4}, {3: 90_000, 5: 6}]
    assert read_places(words, documents, budget) == read


def test_a_set_found_empty_empties_every_combination_holding_it() -> None:
    words = _words((3,), (3,), (3,))
    sets = EmptySets(words, frozenset({0, 1}))
    flat = [c for group in combinations(words) for c in group]
    assert sets.unprobed(flat) == [frozenset({0, 1})]
    assert sets.match(FTS5, frozenset({0, 1})) == '("s0_3") AND ("s1_3")'
    sets.learn([frozenset({0, 1})], found=set())
    assert sets.unprobed(flat) == []
    emptied = {c.words for c in flat if sets.empty(c)}
    assert emptied == {(0, 1), (0, 1, 2)}
    found = EmptySets(words, frozenset({0, 1}))
    found.learn([frozenset({0, 1})], found={0})
    assert not any(found.empty(c) for c in flat)


_WORDS = [
    PlanWord("leas", 2.5, tuple(range(LEVELS))),
    PlanWord("march", 1.25, (0, 3)),
    PlanWord("rent", 0.3, tuple(range(LEVELS))),
    PlanWord("the", 0.01, (1, 7)),
]


@given(
    st.dictionaries(
        st.integers(0, 10_000),
        st.dictionaries(st.integers(0, 3), st.integers(0, LEVELS - 1), min_size=1),
    ),
    st.integers(1, 12),
    st.one_of(st.none(), st.integers(0, 10_000)),
)
def test_packed_rows_rank_as_their_scores(
    rows: dict[int, dict[int, int]], limit: int, cursor_row: int | None
) -> None:
    """A row's levels packed into one int rank it as :func:`score` of its levels does: the
    same keys, to the bit, in the same order, after any cursor."""
    packed = {row: sum(held_at(w, lv) for w, lv in held.items()) for row, held in rows.items()}
    expected = sorted(SearchKey(-score(_WORDS, held), 0, row) for row, held in rows.items())
    after = None
    if cursor_row is not None and expected:
        after = expected[cursor_row % len(expected)]
        expected = [key for key in expected if key > after]
    assert best_keys(_WORDS, packed, 0, limit, after) == expected[:limit]


def test_a_rows_packed_levels_name_each_word_once() -> None:
    assert held_at(0, 0) == 1
    assert held_at(1, LEVELS - 1) == LEVELS << 4
    assert best_keys(_WORDS, {7: held_at(3, 7) + held_at(0, 2)}, 1, 10, None) == [
        SearchKey(-score(_WORDS, {0: 2, 3: 7}), 1, 7)
    ]
    assert best_keys(_WORDS, {}, 0, 10, None) == []
    # Statement n asked place n: a row found by two places holds both.
    found = rows_held([(0, 7), (1, 7), (0, 9)], [(0, 2), (3, 7)])
    assert found == {7: held_at(0, 2) + held_at(3, 7), 9: held_at(0, 2)}
