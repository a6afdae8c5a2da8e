"""Provider retry rules: which answers are worth retrying, and the adapters' default policy.

The policy type and the timing functions are :mod:`om_core.policy.backoff`'s (pure: the adapter
passes in the attempt number, a random draw in ``[0, 1)`` and the parsed ``Retry-After``).
"""

from __future__ import annotations

from typing import Final

from om_core.policy.backoff import RetryPolicy

RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

PROVIDER_RETRY_POLICY: Final = RetryPolicy(
    attempts=4,
    base_s=0.5,
    cap_s=20.0,
    multiplier=2.0,
    jitter=0.5,
    max_retry_after_s=60.0,
    retry_after_jitter=0.0,
    give_up_on_long_retry_after=True,
)
"""The adapters' default: four attempts, backoff from 0.5 s doubling up to 20 s with half
jitter. A ``Retry-After`` is honoured exactly, unless it asks for more than 60 s: then retrying
is pointless within one task and the call gives up. :func:`om_workers.providers.setup.retry_policy`
derives the worker's policy from this one and the settings."""


def is_retryable_status(status: int) -> bool:
    """True for statuses worth retrying: 408, 429 and the transient 5xx."""
    return status in RETRYABLE_STATUSES or 500 <= status <= 599
