"""Observational-memory settings: nested groups, their defaults, and the removed flat keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError

from om_core.errors import InvalidSettingsError
from om_core.ledger.models import Frozen

DEFAULT_OBSERVATION_MESSAGE_TOKENS = 10_000
DEFAULT_REFLECTION_OBSERVATION_TOKENS = 20_000
DEFAULT_COMPACT_AFTER_TOKENS = 81_000
DEFAULT_RECENT_MESSAGES = 8
DEFAULT_OBSERVATIONS_POOL_MAX_TOKENS = 20_000
DEFAULT_DROPPER_TARGET_TOKENS = 10_000
DEFAULT_PAGE_LIMIT = 20
MAX_PAGE_LIMIT = 100
DEFAULT_AGENT_MAX_TURNS = 16

# Flat keys removed in favour of nested groups: each flat key and the nested key that replaces it.
REMOVED_FLAT_KEYS: Mapping[str, str] = {
    "observeAfterTokens": "observation.messageTokens",
    "reflectAfterTokens": "reflection.observationTokens",
    "compactAfterTokens": "context.compactAfterTokens",
    "keepRecentEntries": "context.recentMessages",
    "recentMessageMaxTokens": "context.recentMessageMaxTokens",
    "observationsPoolMaxTokens": "context.observationsPoolMaxTokens",
    "observationsPoolTargetTokens": "dropper.targetTokens",
    "workerModel": "observation.model / reflection.model / dropper.model",
    "workerProvider": "observation.provider / reflection.provider / dropper.provider",
    "thinkingLevel": "observation.thinkingLevel / reflection.thinkingLevel / dropper.thinkingLevel",
    "requireExplicitModel": (
        "observation.requireExplicitModel / reflection.requireExplicitModel / "
        "dropper.requireExplicitModel"
    ),
}


class WorkerSettings(Frozen):
    """What every worker group may name: provider, model, instructions, thinking level."""

    provider: str | None = None
    model: str | None = None
    instructions: str | None = None
    thinking_level: str | None = None
    require_explicit_model: bool = False


class ObservationSettings(WorkerSettings):
    message_tokens: int = Field(default=DEFAULT_OBSERVATION_MESSAGE_TOKENS, gt=0)


class ReflectionSettings(WorkerSettings):
    observation_tokens: int = Field(default=DEFAULT_REFLECTION_OBSERVATION_TOKENS, gt=0)


class DropperSettings(WorkerSettings):
    target_tokens: int = Field(default=DEFAULT_DROPPER_TARGET_TOKENS, gt=0)
    policy: Literal["model", "lowest-relevance"] = "model"


class ContextSettings(Frozen):
    compact_after_tokens: int = Field(default=DEFAULT_COMPACT_AFTER_TOKENS, gt=0)
    recent_messages: int = Field(default=DEFAULT_RECENT_MESSAGES, ge=0)
    recent_message_max_tokens: int | None = Field(default=None, gt=0)
    observations_pool_max_tokens: int = Field(default=DEFAULT_OBSERVATIONS_POOL_MAX_TOKENS, gt=0)


class RetrievalSettings(Frozen):
    page_limit: int = Field(default=DEFAULT_PAGE_LIMIT, ge=1, le=MAX_PAGE_LIMIT)


class ObservationalMemorySettings(Frozen):
    """Resolved settings; every field has a default."""

    observation: ObservationSettings = ObservationSettings()
    reflection: ReflectionSettings = ReflectionSettings()
    dropper: DropperSettings = DropperSettings()
    context: ContextSettings = ContextSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    agent_max_turns: int = Field(default=DEFAULT_AGENT_MAX_TURNS, gt=0)
    passive: bool = False
    debug_log: bool = False


def resolve_settings(
    settings: ObservationalMemorySettings | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ObservationalMemorySettings:
    """Merge ``settings`` (JSON-like, camelCase or snake_case) with ``overrides`` over defaults.

    Raises ``TypeError`` naming the key and its nested replacement for every removed flat key
    (before anything else happens), and :class:`InvalidSettingsError` for unknown keys or
    out-of-range values.
    """
    base: dict[str, Any]
    if isinstance(settings, ObservationalMemorySettings):
        base = settings.model_dump(by_alias=True)
    elif settings is None:
        base = {}
    elif isinstance(settings, Mapping):
        _reject_removed_keys(settings)
        base = dict(settings)
    else:
        raise InvalidSettingsError(f"settings must be a mapping, got {type(settings).__name__}")
    if overrides is not None:
        if not isinstance(overrides, Mapping):
            raise InvalidSettingsError("overrides must be a mapping")
        _reject_removed_keys(overrides)
        base = _deep_merge(base, overrides)
    try:
        return ObservationalMemorySettings.model_validate(_legacy_target_tokens(base))
    except ValidationError as exc:
        raise InvalidSettingsError(_describe(exc)) from None


def _reject_removed_keys(settings: Mapping[str, Any]) -> None:
    for key in settings:
        if key in REMOVED_FLAT_KEYS:
            raise TypeError(
                f"observational-memory setting {key!r} was removed; "
                f"use {REMOVED_FLAT_KEYS[key]} instead"
            )


def _legacy_target_tokens(settings: dict[str, Any]) -> dict[str, Any]:
    """``context.observationsPoolTargetTokens`` (legacy) still feeds ``dropper.targetTokens``."""
    context = settings.get("context")
    if not isinstance(context, Mapping):
        return settings
    legacy = next(
        (
            context[k]
            for k in ("observationsPoolTargetTokens", "observations_pool_target_tokens")
            if k in context
        ),
        None,
    )
    if legacy is None:
        return settings
    context = {
        k: v
        for k, v in context.items()
        if k not in ("observationsPoolTargetTokens", "observations_pool_target_tokens")
    }
    dropper = dict(settings.get("dropper") or {})
    if "targetTokens" not in dropper and "target_tokens" not in dropper:
        dropper["targetTokens"] = legacy
    return {**settings, "context": context, "dropper": dropper}


def _deep_merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        current = merged.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[key] = _deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        parts.append(f"{where}: {error['msg']}")
    return "invalid observational-memory settings: " + "; ".join(parts)
