"""Token estimates: about four characters a token, the same rule for every caller.

The estimate only gates work (observe after N tokens, trim the window); it never needs a
tokenizer, so it stays pure and fast.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the models count their tokens with this module's rule
    from om_core.ledger.models import Message, SessionEntry

CHARS_PER_TOKEN = 4


def estimate_text_tokens(text: str) -> int:
    """Tokens of a plain string (ceil of characters / 4)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def estimate_message_tokens(message: Message) -> int:
    """Tokens of a message: its text, tool-call names and JSON arguments, tool name (counted
    once per message object: :attr:`Message.estimated_tokens`)."""
    return message.estimated_tokens


def count_message_tokens(message: Message) -> int:
    """:func:`estimate_message_tokens`, counted afresh."""
    size = len(message.text)
    for call in message.tool_calls:
        size += len(call.name) + len(json.dumps(call.arguments, separators=(",", ":")))
    if message.tool_name:
        size += len(message.tool_name)
    return -(-size // CHARS_PER_TOKEN)


def estimate_entry_tokens(entry: SessionEntry) -> int:
    """Tokens of an entry: its message, its compaction summary, or its JSON data."""
    if entry.message is not None:
        return estimate_message_tokens(entry.message)
    if entry.summary is not None:
        return estimate_text_tokens(entry.summary)
    if entry.data is not None:
        return estimate_text_tokens(json.dumps(entry.data, separators=(",", ":")))
    return 0
