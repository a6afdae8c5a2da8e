"""Model provider adapters over httpx, implementing ``om_core.provider.Provider``."""

from om_workers.providers.anthropic import AnthropicProvider
from om_workers.providers.http import JsonPoster
from om_workers.providers.openai import OpenAICompatibleProvider
from om_workers.providers.retry import RetryPolicy

__all__ = ["AnthropicProvider", "JsonPoster", "OpenAICompatibleProvider", "RetryPolicy"]
