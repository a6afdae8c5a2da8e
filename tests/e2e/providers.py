"""Test providers for worker processes, named by ``OM_PROVIDER=tests.e2e.providers:<factory>``.

``OM_TEST_PROVIDER_DELAY_S`` (read only here) slows every provider call, so a test can kill a
worker mid-run or keep a run in progress while it sends a burst.
"""

from __future__ import annotations

import os
import time

from om_core.extractive import ExtractiveProvider
from om_core.provider import ProviderRequest, ProviderResponse

DELAY_ENV = "OM_TEST_PROVIDER_DELAY_S"


class SlowExtractiveProvider(ExtractiveProvider):
    """The extractive provider, each call delayed by ``OM_TEST_PROVIDER_DELAY_S`` seconds."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        time.sleep(self.delay_s)
        return super().generate(request)


def slow() -> SlowExtractiveProvider:
    """Factory for ``OM_PROVIDER``."""
    return SlowExtractiveProvider(float(os.environ.get(DELAY_ENV, "0")))
