"""What one flush job's model calls used, counted as the provider reports it.

A job's :class:`UsageMeter` sees every provider answer of the job; its totals are written with
the job's finish (:class:`~om_workers.store.records.JobFinish` ``usage``), and each call's
tokens are counted in ``om_model_tokens_total`` as it returns. Only reported figures are
counted: the offline extractive provider calls no model and reports none, so its jobs have
no usage.
"""

from __future__ import annotations

import threading

from om_core.flush.provider import TokenUsage
from om_workers.metrics import METRICS
from om_workers.store.records import ModelUsage


class UsageMeter:
    """Per-model totals of one tenant's job: calls that reported usage, input and output
    tokens. Safe to share between threads."""

    def __init__(self, tenant_id: str) -> None:
        self.tenant_id = tenant_id
        self._totals: dict[str, tuple[int, int, int]] = {}
        self._lock = threading.Lock()

    def count(self, model: str, usage: TokenUsage | None) -> None:
        """Add one answer of ``model``; an answer without usage adds nothing."""
        if usage is None:
            return
        with self._lock:
            calls, used_in, used_out = self._totals.get(model, (0, 0, 0))
            self._totals[model] = (
                calls + 1,
                used_in + usage.input_tokens,
                used_out + usage.output_tokens,
            )
        METRICS.model_tokens.add(self.tenant_id, model, usage.input_tokens, usage.output_tokens)

    def totals(self) -> tuple[ModelUsage, ...]:
        """The totals so far, one per model, by model name."""
        with self._lock:
            items = sorted(self._totals.items())
        return tuple(ModelUsage(model, *counts) for model, counts in items)


__all__ = ["UsageMeter"]
