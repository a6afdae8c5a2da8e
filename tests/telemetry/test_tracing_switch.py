"""When tracing is on (the standard OTEL_* variables), and that off it does nothing; the GenAI
usage attributes read from vendors' answers."""

from __future__ import annotations

import pytest

from om_core.flush.provider import TokenUsage
from om_workers.telemetry import tracing
from om_workers.telemetry.genai import usage_attributes


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console,otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
    ],
)
def test_tracing_is_on_only_when_the_otel_environment_asks(
    environ: dict[str, str], on: bool
) -> None:
    assert tracing.tracing_requested(environ) is on


def test_off_every_helper_does_nothing() -> None:
    assert tracing.configure_tracing("om-test", {}) is False
    assert not tracing.enabled()
    with tracing.span("anything", attributes={"k": "v"}), tracing.detached():
        assert tracing.current_ids() is None
        assert tracing.inject_headers() == {}
        tracing.set_attributes({"k": "v"})
        tracing.rename_current("other")
    with tracing.continued({"traceparent": f"00-{'a' * 32}-{'b' * 16}-01"}, "consumer"):
        assert tracing.current_ids() is None
    tracing.shutdown_tracing()


@pytest.mark.parametrize(
    ("usage", "model", "expected"),
    [
        (
            TokenUsage(input_tokens=12, output_tokens=3),
            "gpt-x",
            {
                "gen_ai.usage.input_tokens": 12,
                "gen_ai.usage.output_tokens": 3,
                "gen_ai.response.model": "gpt-x",
            },
        ),
        (
            TokenUsage(input_tokens=40, output_tokens=7),
            None,
            {"gen_ai.usage.input_tokens": 40, "gen_ai.usage.output_tokens": 7},
        ),
        (None, None, {}),
        (None, 5, {}),
        (None, "m" * 201, {}),
        (None, "m" * 200, {"gen_ai.response.model": "m" * 200}),
    ],
)
def test_usage_attributes_take_only_what_the_vendor_reported(
    usage: TokenUsage | None, model: object, expected: dict[str, object]
) -> None:
    assert usage_attributes(usage, model) == expected
