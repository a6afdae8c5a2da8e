"""Telemetry adapters: OpenTelemetry traces (:mod:`.tracing`) and model-call spans
(:mod:`.genai`). ``om_core`` never imports them."""
