"""Each adapter reads the call's usage from the vendor's own answer, over a real local server:
OpenAI's ``prompt_tokens``/``completion_tokens``, Anthropic's ``input_tokens``/``output_tokens``;
no ``usage`` object is no usage, and a malformed figure counts as 0 without failing the call."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.provider import TokenUsage
from tests.providers.test_adapters import ANTHROPIC, OPENAI, Wire, make, request
from tests.providers.wire_server import Reply, WireServer, running

FIELDS = {
    "openai": ("prompt_tokens", "completion_tokens"),
    "anthropic": ("input_tokens", "output_tokens"),
}


@pytest.fixture
def server() -> Iterator[WireServer]:
    with running() as srv:
        yield srv


def _with_usage(wire: Wire, usage: Any) -> Any:
    answer = wire.text_answer("done")
    answer["usage"] = usage
    return answer


@pytest.mark.parametrize("wire", [OPENAI, ANTHROPIC], ids=lambda w: w.name)
def test_usage_is_read_from_the_vendors_fields(wire: Wire, server: WireServer) -> None:
    input_field, output_field = FIELDS[wire.name]
    reported = {input_field: 1234, output_field: 56, "total_tokens": 1290}
    server.script = [
        Reply(body=_with_usage(wire, reported)),
        Reply(body=wire.text_answer("no usage")),
        Reply(body=_with_usage(wire, {input_field: "many", output_field: -3})),
    ]
    provider, _ = make(wire, server)
    assert provider.generate(request()).usage == TokenUsage(input_tokens=1234, output_tokens=56)
    assert provider.generate(request()).usage is None
    assert provider.generate(request()).usage == TokenUsage(input_tokens=0, output_tokens=0)


def test_the_offline_provider_reports_no_usage() -> None:
    assert ExtractiveProvider().generate(request()).usage is None
