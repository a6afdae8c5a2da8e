"""Model provider adapters over httpx, implementing ``om_core.flush.provider.Provider``.

``RetryPolicy`` is :class:`om_core.policy.backoff.RetryPolicy`, re-exported for the adapters'
``policy``.
"""

from om_core.policy.backoff import RetryPolicy
from om_workers.providers.anthropic import AnthropicProvider
from om_workers.providers.http import JsonPoster
from om_workers.providers.openai import OpenAICompatibleProvider

__all__ = ["AnthropicProvider", "JsonPoster", "OpenAICompatibleProvider", "RetryPolicy"]
