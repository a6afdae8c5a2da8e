from __future__ import annotations

import pytest

from om_core.errors import InvalidMemoryIdError, InvalidSettingsError, WorkerLimitError
from om_core.ledger.ids import create_memory_id, is_memory_id, parse_memory_ref
from om_core.policy import limits
from om_core.policy.limits import resolve_worker_limits
from om_core.settings import REMOVED_FLAT_KEYS, resolve_settings


def test_created_ids_match_the_pattern_and_differ() -> None:
    ids = {create_memory_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(is_memory_id(i) for i in ids)


@pytest.mark.parametrize(
    "value",
    ["abcdef012345", "000000000000"],
)
def test_valid_ids(value: str) -> None:
    assert is_memory_id(value)


@pytest.mark.parametrize(
    "value",
    ["ABCDEF012345", "abcdef01234", "abcdef0123456", "abcdef01234g", "", None, 12, " abcdef012345"],
)
def test_invalid_ids(value: object) -> None:
    assert not is_memory_id(value)


def test_parse_memory_ref_accepts_prefixes_and_rejects_the_rest() -> None:
    assert parse_memory_ref("om:abcdef012345") == "abcdef012345"
    assert parse_memory_ref("reflection:abcdef012345") == "abcdef012345"
    with pytest.raises(InvalidMemoryIdError):
        parse_memory_ref("obs:abcdef012345")


def test_settings_defaults_are_the_documented_ones() -> None:
    s = resolve_settings()
    assert s.observation.message_tokens == 10_000
    assert s.reflection.observation_tokens == 20_000
    assert s.context.compact_after_tokens == 81_000
    assert s.context.recent_messages == 8
    assert s.context.observations_pool_max_tokens == 20_000
    assert s.context.recent_message_max_tokens is None
    assert s.dropper.target_tokens == 10_000
    assert s.dropper.policy == "model"
    assert s.retrieval.page_limit == 20
    assert s.agent_max_turns == 16
    assert s.passive is False and s.debug_log is False


def test_settings_merge_nested_json_and_overrides() -> None:
    s = resolve_settings(
        {"observation": {"messageTokens": 500, "model": "m1"}, "context": {"recentMessages": 3}},
        overrides={"observation": {"thinkingLevel": "low"}, "retrieval": {"page_limit": 100}},
    )
    assert s.observation.message_tokens == 500
    assert s.observation.model == "m1"
    assert s.observation.thinking_level == "low"
    assert s.context.recent_messages == 3
    assert s.retrieval.page_limit == 100


def test_legacy_pool_target_feeds_dropper_target() -> None:
    s = resolve_settings({"context": {"observationsPoolTargetTokens": 1234}})
    assert s.dropper.target_tokens == 1234


@pytest.mark.parametrize("key", sorted(REMOVED_FLAT_KEYS))
def test_each_removed_flat_key_raises_type_error_naming_its_replacement(key: str) -> None:
    with pytest.raises(TypeError) as info:
        resolve_settings({key: 1})
    assert key in str(info.value)
    assert REMOVED_FLAT_KEYS[key].split(" ")[0] in str(info.value)
    with pytest.raises(TypeError):
        resolve_settings(None, overrides={key: 1})


def test_removed_keys_cover_the_documented_list() -> None:
    expected = {
        "observeAfterTokens",
        "reflectAfterTokens",
        "compactAfterTokens",
        "keepRecentEntries",
        "recentMessageMaxTokens",
        "observationsPoolMaxTokens",
        "observationsPoolTargetTokens",
        "workerModel",
        "thinkingLevel",
        "requireExplicitModel",
        "workerProvider",
    }
    assert expected == set(REMOVED_FLAT_KEYS)


@pytest.mark.parametrize(
    "bad",
    [
        {"unknown": 1},
        {"observation": {"messageTokens": 0}},
        {"retrieval": {"pageLimit": 101}},
        {"retrieval": {"pageLimit": 0}},
        {"dropper": {"policy": "random"}},
    ],
)
def test_invalid_settings_are_typed_errors(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidSettingsError):
        resolve_settings(bad)


def test_page_limit_cap_boundary() -> None:
    assert resolve_settings({"retrieval": {"pageLimit": 100}}).retrieval.page_limit == 100


LIMITS = [
    ("max_worker_turns", "max_turns", 16, 64),
    ("max_worker_tool_calls_per_turn", "max_tool_calls_per_turn", 32, 256),
    ("max_worker_tool_calls", "max_tool_calls", 128, 1024),
    ("max_worker_argument_bytes", "max_argument_bytes", 64 * 1024, 1024 * 1024),
    ("max_worker_result_bytes", "max_result_bytes", 64 * 1024, 1024 * 1024),
    ("max_worker_message_bytes", "max_message_bytes", 1024 * 1024, 8 * 1024 * 1024),
    ("max_worker_error_bytes", "max_error_bytes", 1024, 8 * 1024),
]


@pytest.mark.parametrize(("option", "field", "default", "cap"), LIMITS)
def test_worker_limit_defaults_and_caps(option: str, field: str, default: int, cap: int) -> None:
    assert getattr(resolve_worker_limits(), field) == default
    assert getattr(resolve_worker_limits(**{option: cap}), field) == cap
    assert getattr(resolve_worker_limits(**{option: 1}), field) == 1
    for bad in (cap + 1, 0, -1, 1.5, True, "8", float("inf")):
        with pytest.raises(WorkerLimitError):
            resolve_worker_limits(**{option: bad})


def test_named_constants_match_the_table() -> None:
    assert limits.HARD_MAX_WORKER_TURNS == 64
    assert limits.MAX_RENDERED_MEMORY_BYTES == 256 * 1024
    assert limits.MAX_FOLDED_PAYLOAD_BYTES == 512 * 1024
    assert limits.MAX_RECENT_WINDOW_BYTES == 512 * 1024


def test_agent_max_turns_feeds_worker_turns_unless_explicit() -> None:
    s = resolve_settings({"agentMaxTurns": 5})
    assert resolve_worker_limits(settings=s).max_turns == 5
    assert resolve_worker_limits(settings=s, max_worker_turns=9).max_turns == 9
    with pytest.raises(WorkerLimitError):
        resolve_worker_limits(settings=resolve_settings({"agentMaxTurns": 65}))
