"""``om_model_tokens_total``: counted per tenant, model and direction, with the tenant label
bounded to the first N tenants seen and ``(others)`` after them, each series only growing."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from om_workers.metrics import OTHER_TENANTS, ModelTokens


def _samples(tokens: ModelTokens) -> dict[tuple[str, str, str], float]:
    registry = CollectorRegistry()
    registry.register(tokens)
    found: dict[tuple[str, str, str], float] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "om_model_tokens_total":
                labels = sample.labels
                found[(labels["tenant"], labels["model"], labels["direction"])] = sample.value
    assert b"om_model_tokens_total" in generate_latest(registry)
    return found


def test_tokens_by_tenant_model_and_direction_with_bounded_tenants() -> None:
    tokens = ModelTokens(top_n=2)
    tokens.add("acme", "gpt", 100, 10)
    tokens.add("globex", "gpt", 50, 5)
    tokens.add("initech", "gpt", 7, 1)  # third tenant: (others)
    tokens.add("acme", "gpt", 1, 1)
    tokens.add("umbrella", "mini", 3, 2)
    assert _samples(tokens) == {
        ("acme", "gpt", "input"): 101,
        ("acme", "gpt", "output"): 11,
        ("globex", "gpt", "input"): 50,
        ("globex", "gpt", "output"): 5,
        (OTHER_TENANTS, "gpt", "input"): 7,
        (OTHER_TENANTS, "gpt", "output"): 1,
        (OTHER_TENANTS, "mini", "input"): 3,
        (OTHER_TENANTS, "mini", "output"): 2,
    }
    with pytest.raises(ValueError):
        tokens.add("acme", "gpt", -1, 0)
