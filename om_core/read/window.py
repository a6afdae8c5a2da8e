"""The recent-message window: the last N exact messages, never splitting a tool call."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache, partial

from om_core.ledger.models import Message, SessionEntry
from om_core.ledger.tokens import estimate_entry_tokens
from om_core.policy.limits import MAX_RECENT_WINDOW_BYTES
from om_core.policy.redaction import normalize_secrets, redact, scrub

TRUNCATED_MARK = " …[truncated]"


def tool_units(entries: Sequence[SessionEntry]) -> list[list[SessionEntry]]:
    """Group message entries into units: a message plus the tool results that answer it.

    A tool result joins the unit of the assistant message whose call it answers when that
    message is in ``entries``; otherwise (an orphan) it stands alone.
    """
    units: list[list[SessionEntry]] = []
    owner: dict[str, list[SessionEntry]] = {}
    for entry in entries:
        message = entry.message
        assert message is not None
        unit = owner.get(message.tool_call_id or "") if message.role == "tool" else None
        if unit is None:
            unit = [entry]
            units.append(unit)
        else:
            unit.append(entry)
        for call in message.tool_calls:
            owner[call.id] = unit
    return units


def _extend_to_calls(messages: Sequence[SessionEntry], start: int) -> int:
    """Move ``start`` back so that every tool result in the window has its call with it: the
    latest call of its id before it, the one :func:`tool_units` joins it to."""
    position_of_call: dict[str, int] = {}
    earliest = start
    for index, entry in enumerate(messages):
        message = entry.message
        assert message is not None
        if index >= start and message.role == "tool":
            call = position_of_call.get(message.tool_call_id or "", index)
            earliest = min(earliest, call)
        for call_made in message.tool_calls:
            position_of_call[call_made.id] = index
    return earliest


def select_recent_message_entries(
    entries: Sequence[SessionEntry], keep: int, max_tokens: int | None = None
) -> list[SessionEntry]:
    """The last ``keep`` user/assistant/tool message entries, in branch order.

    ``keep`` is a floor: when the oldest kept message is a tool result, the assistant
    message that called it (and what lies between) is kept too. ``max_tokens`` then trims
    whole units (a call with its results) oldest first, by :func:`estimate_entry_tokens`;
    the newest unit always stays.
    """
    if keep < 0:
        raise ValueError("keep must be >= 0")
    if keep == 0:
        return []
    messages = [e for e in entries if e.is_eligible_observation_source]
    start = _extend_to_calls(messages, max(0, len(messages) - keep))
    window = messages[start:]
    if max_tokens is None:
        return window
    units = tool_units(window)
    total = sum(estimate_entry_tokens(e) for e in window)
    while len(units) > 1 and total > max_tokens:
        total -= sum(estimate_entry_tokens(e) for e in units.pop(0))
    return [e for unit in units for e in unit]


def render_message(message: Message) -> str:
    """One message as plain text: a role tag, its text, and its tool calls (rendered once per
    message object: :attr:`Message.rendered`)."""
    return message.rendered


@lru_cache(maxsize=64)
def _redactor(keys: tuple[str, ...]) -> partial[str]:
    return partial(redact, secrets=keys)


def window_line(message: Message, keys: tuple[str, ...]) -> str:
    """``message`` as a line of the recent window, the secrets ``keys`` (normalized) redacted:
    kept on the message for those keys, so a line is redacted once, read after read."""
    if not keys:
        return message.rendered
    return message.rendered_as(keys, _redactor(keys))


def render_recent_message_window(
    entries: Sequence[SessionEntry],
    secrets: Iterable[str] = (),
    *,
    max_bytes: int = MAX_RECENT_WINDOW_BYTES,
) -> tuple[str, tuple[str, ...]]:
    """Render selected message entries; return the text and the ids actually shown.

    Never more than ``max_bytes`` (UTF-8, at most 512 KiB): whole units are left
    out oldest first, and a single unit that is still too large is cut with a mark.
    """
    max_bytes = min(max_bytes, MAX_RECENT_WINDOW_BYTES)
    keys = normalize_secrets(secrets)
    units = [
        [(e.id, window_line(e.message, keys)) for e in unit if e.message]
        for unit in tool_units([e for e in entries if e.message is not None])
    ]
    sizes = [sum(len(text.encode("utf-8")) + 1 for _, text in unit) for unit in units]
    total = sum(sizes) - 1  # lines are joined by newlines, not ended by them
    while len(units) > 1 and total > max_bytes:
        units.pop(0)
        total -= sizes.pop(0)
    pairs = [pair for unit in units for pair in unit]
    text = "\n".join(t for _, t in pairs)
    if len(text.encode("utf-8")) > max_bytes:
        text = scrub(_cut(text, max_bytes), keys)
    return text, tuple(i for i, _ in pairs)


def _cut(text: str, max_bytes: int) -> str:
    room = max_bytes - len(TRUNCATED_MARK.encode("utf-8"))
    head = text.encode("utf-8")[:room].decode("utf-8", errors="ignore")
    return head + TRUNCATED_MARK
