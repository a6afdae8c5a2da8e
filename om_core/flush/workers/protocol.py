"""The worker tool protocol: tool names and schemas, and the delimited prompt format.

Instructions go in the system message; the material to work on goes in the user message as
one JSON object per line between ``<tag>`` / ``</tag>`` delimiters. ``<`` and ``>`` inside
values are written as ``\\u003c`` / ``\\u003e`` so quoted text can never close a block or
open a new one, and the model cannot mistake its own instructions for the user's words.
Every provider (model or offline heuristic) sees exactly this text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from om_core.flush.provider import ToolSpec
from om_core.ledger.models import SessionEntry
from om_core.policy.limits import WorkerLimits
from om_core.policy.redaction import redact

RECORD_OBSERVATION = "record_observation"
RECORD_REFLECTION = "record_reflection"
DROP_OBSERVATIONS = "drop_observations"
TRANSCRIPT_TAG = "transcript"
OBSERVATIONS_TAG = "observations"
# Longest text of one entry shown to the observer; the raw entry stays recallable by id.
MAX_PROMPT_ENTRY_CHARS = 8_000
_LIMITS_PREFIX = "Limits: "
_POOL_PREFIX = "Pool: "
_TRUNCATED = " [truncated]"

_ID_LIST = {"type": "array", "items": {"type": "string"}, "minItems": 1}

OBSERVATION_TOOL = ToolSpec(
    name=RECORD_OBSERVATION,
    description=(
        "Record one short, self-contained observation about the transcript, citing the ids of "
        "the transcript entries it rests on and a relevance score between 0 and 1."
    ),
    parameters={
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1},
            "sourceEntryIds": _ID_LIST,
            "relevance": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["text", "sourceEntryIds"],
        "additionalProperties": False,
    },
)

REFLECTION_TOOL = ToolSpec(
    name=RECORD_REFLECTION,
    description=(
        "Record one reflection: a higher-level summary of several observations, citing their "
        "ids. It must be shorter than the observations it summarizes."
    ),
    parameters={
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1},
            "observationIds": _ID_LIST,
        },
        "required": ["text", "observationIds"],
        "additionalProperties": False,
    },
)

DROP_TOOL = ToolSpec(
    name=DROP_OBSERVATIONS,
    description="Drop the listed observations from the active pool (they stay recallable).",
    parameters={
        "type": "object",
        "properties": {"observationIds": _ID_LIST},
        "required": ["observationIds"],
        "additionalProperties": False,
    },
)


def encode_line(value: Mapping[str, Any]) -> str:
    """One prompt line: compact JSON with angle brackets escaped."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e")


def block(tag: str, lines: Iterable[str]) -> str:
    """Lines wrapped in ``<tag>`` / ``</tag>`` delimiter lines."""
    return "\n".join([f"<{tag}>", *lines, f"</{tag}>"])


def parse_block(text: str, tag: str) -> list[dict[str, Any]]:
    """The JSON objects between ``<tag>`` and ``</tag>`` (empty when the block is absent)."""
    start = text.find(f"<{tag}>\n")
    end = text.find(f"\n</{tag}>", start)
    if start < 0 or end < 0:
        return []
    body = text[start + len(tag) + 3 : end]
    return [json.loads(line) for line in body.split("\n") if line.strip()]


def system_message(instructions: str, limits: WorkerLimits) -> str:
    """A worker's system message: its instructions, then the announced call limits."""
    return f"{instructions}\n{limits_line(limits)}"


def limits_line(limits: WorkerLimits) -> str:
    """The system-message line telling the model how many calls it may make."""
    return _LIMITS_PREFIX + json.dumps(
        {
            "maxToolCallsPerTurn": limits.max_tool_calls_per_turn,
            "maxToolCalls": limits.max_tool_calls,
            "maxTurns": limits.max_turns,
        },
        separators=(",", ":"),
    )


def parse_limits(text: str) -> dict[str, int]:
    """The limits a system message announces (empty when it announces none)."""
    match = re.search(r"^Limits: (\{.*\})$", text, flags=re.MULTILINE)
    if match is None:
        return {}
    value = json.loads(match.group(1))
    return {k: v for k, v in value.items() if isinstance(v, int)}


def pool_line(pool_tokens: int, target_tokens: int) -> str:
    """The dropper prompt line stating the pool size and the target, in tokens."""
    return _POOL_PREFIX + json.dumps(
        {"poolTokens": pool_tokens, "targetTokens": target_tokens}, separators=(",", ":")
    )


def parse_pool(text: str) -> dict[str, int]:
    """The pool line of a dropper prompt (empty when absent)."""
    match = re.search(r"^Pool: (\{.*\})$", text, flags=re.MULTILINE)
    return json.loads(match.group(1)) if match else {}


def entry_text(entry: SessionEntry, secrets: Iterable[str]) -> str:
    """What the observer sees of an entry: its text plus tool calls, redacted and capped."""
    message = entry.message
    if message is None:
        return ""
    parts = [message.text] if message.text else []
    for call in message.tool_calls:
        arguments = json.dumps(call.arguments, separators=(",", ":"), ensure_ascii=False)
        parts.append(f"[tool call {call.name} {arguments}]")
    text = redact("\n".join(parts), secrets)
    if len(text) > MAX_PROMPT_ENTRY_CHARS:
        text = text[: MAX_PROMPT_ENTRY_CHARS - len(_TRUNCATED)] + _TRUNCATED
    return text


def transcript_line(entry: SessionEntry, secrets: Iterable[str]) -> str:
    """One observer transcript line for an eligible message entry.

    Keys in order: ``id``, ``role``, ``tool`` (tool results), ``time`` (the entry's
    ``created_at``, when known, so relative dates in the text can be anchored), ``text``.
    """
    assert entry.message is not None
    value: dict[str, Any] = {"id": entry.id, "role": entry.message.role}
    if entry.message.tool_name:
        value["tool"] = entry.message.tool_name
    if entry.created_at:
        value["time"] = entry.created_at
    value["text"] = entry_text(entry, secrets)
    return encode_line(value)
