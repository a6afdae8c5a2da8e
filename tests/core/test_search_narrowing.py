"""Narrowing a tenant-wide search by session metadata: the pairs accepted, those refused (at
each cap's boundary), and what a session's metadata must hold."""

from __future__ import annotations

import pytest

from om_core.errors import InvalidSearchQueryError
from om_core.read.search_narrowing import (
    MAX_NARROWING_KEY_CHARS,
    MAX_NARROWING_PAIRS,
    MAX_NARROWING_VALUE_CHARS,
    MetadataNarrowing,
    narrowable_pairs,
    parse_narrowing,
)


def test_no_pairs_is_no_narrowing() -> None:
    assert parse_narrowing(None) is None
    assert parse_narrowing([]) is None


def test_pairs_split_at_the_first_colon_in_order() -> None:
    narrowing = parse_narrowing(["customer:acme", "url:https://x.example:8443/a", "note:"])
    assert narrowing == MetadataNarrowing(
        (("customer", "acme"), ("url", "https://x.example:8443/a"), ("note", ""))
    )


def test_each_cap_is_accepted_at_its_limit() -> None:
    pairs = [f"k{n}:v" for n in range(MAX_NARROWING_PAIRS)]
    assert parse_narrowing(pairs) is not None
    assert parse_narrowing(["k" * MAX_NARROWING_KEY_CHARS + ":v"]) is not None
    assert parse_narrowing(["k:" + "v" * MAX_NARROWING_VALUE_CHARS]) is not None
    assert parse_narrowing(["a.b-c_D9:v"]) is not None


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ([f"k{n}:v" for n in range(MAX_NARROWING_PAIRS + 1)], "at most 8 key:value pairs"),
        (["customer"], "pair 1 is not key:value"),
        (["a:b", ":acme"], "pair 2: a key is 1-128"),
        (["k" * (MAX_NARROWING_KEY_CHARS + 1) + ":v"], "pair 1: a key is 1-128"),
        (['cust"omer:acme'], "a key is 1-128 letters"),
        (["k:" + "v" * (MAX_NARROWING_VALUE_CHARS + 1)], "at most 256 characters"),
        (["k:a", "k:b"], "pair 2 names a key given before"),
        (["k:ac\x00me"], "pair 1: a value holds NUL"),
        (["k:\ud800acme"], "pair 1: a value holds NUL or a lone surrogate"),
    ],
)
def test_malformed_pairs_are_refused_without_quoting_them(values: list[str], reason: str) -> None:
    with pytest.raises(InvalidSearchQueryError) as refused:
        parse_narrowing(values)
    assert reason in str(refused.value)
    assert "acme" not in str(refused.value) and "vvvv" not in str(refused.value)


@pytest.mark.parametrize(
    ("metadata", "pairs"),
    [
        ({}, []),
        ({"tier": "3", "customer": "acme"}, [("customer", "acme"), ("tier", "3")]),
        # Only a string can match: a number, a list, an object, true or null never does.
        ({"tier": 3, "tags": ["a"], "nested": {"a": "b"}, "on": True, "none": None}, []),
        ({"a.b_c-D9": "", "emoji": "café ☕"}, [("a.b_c-D9", ""), ("emoji", "café ☕")]),
        # Keys a narrowing cannot name.
        ({"a key": "x", "": "x", "k:v": "x", "ключ": "x"}, []),
        ({"k" * MAX_NARROWING_KEY_CHARS: "x"}, [("k" * MAX_NARROWING_KEY_CHARS, "x")]),
        ({"k" * (MAX_NARROWING_KEY_CHARS + 1): "x"}, []),
        # Values a narrowing cannot give.
        ({"v": "v" * MAX_NARROWING_VALUE_CHARS}, [("v", "v" * MAX_NARROWING_VALUE_CHARS)]),
        ({"v": "v" * (MAX_NARROWING_VALUE_CHARS + 1)}, []),
        ({"nul": "a\x00b", "surrogate": "a\ud800"}, []),
    ],
)
def test_narrowable_pairs_are_those_a_narrowing_can_name(
    metadata: dict[str, object], pairs: list[tuple[str, str]]
) -> None:
    assert narrowable_pairs(metadata) == pairs
    for key, value in pairs:
        assert parse_narrowing([f"{key}:{value}"]) == MetadataNarrowing(((key, value),))
