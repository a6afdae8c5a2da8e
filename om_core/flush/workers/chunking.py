"""Splitting an observation backlog into observer inputs that fit the transcript cap.

A backlog is never dropped and never sent whole when it is too large: it is cut, oldest first,
into chunks whose prompt fits a byte budget and whose eligible messages fit the run's call
budget (so a one-observation-per-message observer can cover each of them). Bookkeeping entries
ride along with the chunk they fall in, so each chunk's last entry is its coverage cursor.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from om_core.flush.workers.protocol import transcript_line
from om_core.ledger.fold import is_eligible_observation_source
from om_core.ledger.models import SessionEntry
from om_core.policy.limits import WorkerLimits

# Room left in the transcript, besides the prompt, for the model's calls and their results.
PROMPT_SHARE = 2
# JSON framing of the system and user messages around their text.
_FRAMING_BYTES = 128


def prompt_budget(limits: WorkerLimits, system: str) -> int:
    """Bytes the observer transcript block may take: half the cap, minus the system message.

    The two short lines before the block (the batch's span and the data note, under 200
    bytes) are not counted: they come out of the half kept for the model's calls.
    """
    return limits.max_message_bytes // PROMPT_SHARE - _json_len(system) - _FRAMING_BYTES


def max_sources_per_chunk(limits: WorkerLimits) -> int:
    """Eligible messages per chunk: one observation call each must fit the run's call budget."""
    return max(1, min(limits.max_tool_calls, limits.max_turns * limits.max_tool_calls_per_turn))


def plan_chunks(
    entries: Sequence[SessionEntry],
    *,
    budget_bytes: int,
    max_sources: int,
    secrets: Iterable[str] = (),
) -> list[list[SessionEntry]]:
    """Cut ``entries`` (branch order) into consecutive chunks, oldest first.

    Each chunk's eligible lines take at most ``budget_bytes`` (as escaped in the transcript's
    JSON) and number at most ``max_sources``; a single line larger than the budget still gets
    a chunk of its own (the worker then fails closed on the transcript cap rather than
    silently skipping it). Concatenating the chunks gives back ``entries``.
    """
    known = tuple(secrets)
    chunks: list[list[SessionEntry]] = []
    current: list[SessionEntry] = []
    used = sources = 0
    for entry in entries:
        if is_eligible_observation_source(entry):
            cost = _json_len(transcript_line(entry, known)) + 2
            if sources and (used + cost > budget_bytes or sources >= max_sources):
                chunks.append(current)
                current, used, sources = [], 0, 0
            used += cost
            sources += 1
        current.append(entry)
    if current:
        chunks.append(current)
    return chunks


def _json_len(text: str) -> int:
    """UTF-8 bytes of ``text`` once escaped inside a JSON string (quotes excluded)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8")) - 2
