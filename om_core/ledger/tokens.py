"""Token estimates: about four characters a token, the same rule for every caller.

The estimate only gates work (observe after N tokens, trim the window); it never needs a
tokenizer, so it stays pure and fast.
"""

from __future__ import annotations

import json

from om_core.ledger.models import Message, SessionEntry
from om_core.ledger.sizes import CHARS_PER_TOKEN, estimate_text_tokens

__all__ = [
    "CHARS_PER_TOKEN",
    "estimate_entry_tokens",
    "estimate_message_tokens",
    "estimate_text_tokens",
]


def estimate_message_tokens(message: Message) -> int:
    """Tokens of a message: its text, tool-call names and JSON arguments, tool name (counted
    once per message object: :attr:`Message.estimated_tokens`)."""
    return message.estimated_tokens


def estimate_entry_tokens(entry: SessionEntry) -> int:
    """Tokens of an entry: its message, its compaction summary, or its JSON data."""
    message = entry.message
    if message is not None:
        return message.estimated_tokens
    if entry.summary is not None:
        return estimate_text_tokens(entry.summary)
    if entry.data is not None:
        return estimate_text_tokens(json.dumps(entry.data, separators=(",", ":")))
    return 0
