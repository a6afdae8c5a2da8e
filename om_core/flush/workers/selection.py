"""Which provider, model and credential a worker runs with, or why it is skipped.

Resolution order: per-worker config, then the settings group, then ``session_model``
for the model. ``require_explicit_model`` turns the ``session_model`` fallback off (skip with
``missing_model``). Credentials are explicit only: a worker that requests one whose resolver
answers ``None`` is skipped with ``missing_credential``; nothing is read from the environment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from om_core.flush.provider import Provider
from om_core.settings import WorkerSettings

MISSING_MODEL = "missing_model"
MISSING_PROVIDER = "missing_provider"
MISSING_CREDENTIAL = "missing_credential"

CredentialResolver = Callable[[str], str | None]


@dataclass(frozen=True)
class WorkerConfig:
    """Host configuration of one worker; ``None`` fields fall back to the settings group.

    ``credential`` names a credential to request from the runtime's resolver;
    ``request_credential`` requests the one named after the resolved model's provider id
    (the part of ``model`` before ``/``, e.g. ``openai`` for ``openai/gpt-4o-mini``).
    """

    provider: Provider | None = None
    model: str | None = None
    instructions: str | None = None
    thinking_level: str | None = None
    require_explicit_model: bool | None = None
    credential: str | None = None
    request_credential: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedWorker:
    """Everything one worker run needs, already resolved."""

    provider: Provider
    model: str
    instructions: str | None
    options: dict[str, Any]
    credential: str | None


def resolve_worker(
    config: WorkerConfig,
    group: WorkerSettings,
    *,
    providers: Mapping[str, Provider],
    fallback_provider: Provider | None,
    session_model: str | None,
    credentials: CredentialResolver | None,
) -> ResolvedWorker | str:
    """The resolved worker, or the skip reason (``missing_provider|model|credential``)."""
    provider = config.provider
    if provider is None and group.provider is not None:
        provider = providers.get(group.provider)
    provider = provider or fallback_provider
    if provider is None:
        return MISSING_PROVIDER
    model = config.model or group.model
    explicit_only = (
        config.require_explicit_model
        if config.require_explicit_model is not None
        else group.require_explicit_model
    )
    if model is None and not explicit_only:
        model = session_model
    if not model:
        return MISSING_MODEL
    credential: str | None = None
    name = config.credential or (model.partition("/")[0] if config.request_credential else None)
    if name is not None:
        credential = credentials(name) if credentials is not None else None
        if not credential:
            return MISSING_CREDENTIAL
    options = dict(config.options)
    thinking = config.thinking_level or group.thinking_level
    if thinking is not None:
        options.setdefault("thinkingLevel", thinking)
    return ResolvedWorker(
        provider=provider,
        model=model,
        instructions=config.instructions or group.instructions,
        options=options,
        credential=credential,
    )
