"""The size rule of token estimates: about four characters a token.

Below the models, so that a message can count its own tokens once
(:attr:`~om_core.ledger.models.Message.estimated_tokens`); callers use
:mod:`om_core.ledger.tokens`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

CHARS_PER_TOKEN = 4


def estimate_text_tokens(text: str) -> int:
    """Tokens of a plain string (ceil of characters / 4)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def message_tokens(
    text: str, calls: Iterable[tuple[str, Mapping[str, Any]]], tool_name: str | None
) -> int:
    """Tokens of a message's parts: its text, each tool call's name and JSON arguments, and
    the name of the tool that answered."""
    size = len(text)
    for name, arguments in calls:
        size += len(name) + len(json.dumps(arguments, separators=(",", ":")))
    if tool_name:
        size += len(tool_name)
    return -(-size // CHARS_PER_TOKEN)
