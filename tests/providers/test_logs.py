"""Every om process's log lines: one JSON object, the work's context, secrets redacted."""

from __future__ import annotations

import json
import logging

import pytest

from om_workers.logs import configure_json_logging, log_context

SECRET = "sk-live-0123456789"


def test_a_record_is_one_redacted_json_line_with_its_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_json_logging(["om.test"], "INFO", lambda: (SECRET, "ab"))
    log = logging.getLogger("om.test")
    with log_context(job_id="j1", tenant_id="t1"), log_context(session_id="s1"):
        log.info("calling the provider with %s", SECRET, extra={"attempt": 2})
    try:
        raise RuntimeError(f"upstream echoed {SECRET}")
    except RuntimeError:
        log.exception("failed")
    first, second = capsys.readouterr().err.splitlines()
    record = json.loads(first)
    assert record["message"] == "calling the provider with [REDACTED]"
    assert (record["job_id"], record["tenant_id"], record["session_id"]) == ("j1", "t1", "s1")
    assert record["attempt"] == 2 and record["level"] == "info" and record["logger"] == "om.test"
    failure = json.loads(second)
    assert SECRET not in second and "[REDACTED]" in failure["exception"]
    assert "job_id" not in failure  # the context ended with its block
    assert json.loads(first)["message"].count("[REDACTED]") == 1
