"""How much of a branch's tail a read needs: the recent window, the tool calls it answers, and
(for a context) every message memory does not cover yet, found by walking from the newest
entry back, never further than needed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from om_core.ledger.models import SessionEntry
from om_workers.store import SqlStore

TAIL_FIRST_READ = 64


def recent_tail(
    store: SqlStore,
    tenant_id: str,
    session_id: str,
    keep: int,
    *,
    unobserved: bool = False,
    cursor: str | None = None,
    max_tokens: int | None = None,
) -> tuple[SessionEntry, ...]:
    """The shortest branch tail that holds the last ``keep`` messages and every tool call
    that one of them answers, read in doubling steps (the whole branch at worst).

    With ``unobserved`` the tail also reaches back to ``cursor`` (the observation cursor;
    ``None``: nothing observed yet, so the whole branch), so it holds every message memory
    does not cover yet, unless those alone pass ``max_tokens``: a context could not show more
    of them anyway, and the rest is counted, not read.
    """
    limit = max(TAIL_FIRST_READ, 4 * keep)
    walk = TailWalk(keep, TailReach(cursor, max_tokens) if unobserved else None)
    while True:
        tail = store.read_tail(tenant_id, session_id, limit)
        if len(tail) < limit or walk.holds(tail):
            return tail
        limit *= 2


@dataclass(frozen=True)
class TailReach:
    """How far back a tail must reach: to the entry ``cursor`` (the observation cursor;
    ``None``: the branch's root), unless its messages alone pass ``max_tokens``."""

    cursor: str | None
    max_tokens: int | None


class TailWalk:
    """Whether a branch tail is long enough, asked of a tail that grows backwards between
    questions, as a read doubles the tail it reads: each question walks only the entries
    older than those walked for the last one, so a read that doubles its tail three times
    walks it once.

    Each tail asked about must end with the one asked about before (the same branch, read
    in the same transaction)."""

    def __init__(self, keep: int, reach: TailReach | None) -> None:
        self._keep = keep
        self._cursor = reach.cursor if reach is not None else None
        self._budget = reach.max_tokens if reach is not None else None
        self._reached = reach is None
        self._walked = 0  # entries walked, from the newest
        self._messages = 0
        self._tokens = 0
        self._wanted: set[str] = set()  # calls answered in the window and not seen yet
        self._calls: set[str] = set()  # calls seen so far

    def holds(self, tail: Sequence[SessionEntry], *, reached: bool = False) -> bool:
        """Whether ``tail`` holds more than the last ``keep`` messages, the tool calls those
        answer, and (with a reach) reaches the cursor or more message tokens than the
        budget. Stops as soon as all of it holds: ``reached`` (the caller found the cursor
        in ``tail``, :func:`~om_workers.store.tail_cache.holds_entry`) spares walking back to it."""
        keep, cursor, budget = self._keep, self._cursor, self._budget
        messages, tokens = self._messages, self._tokens
        reached = reached or self._reached
        if not reached and cursor is None and budget is None:
            return False  # only the branch's root ends the reach: the caller sees it
        wanted, calls = self._wanted, self._calls
        older = len(tail) - self._walked
        holds = False
        for index in range(older - 1, -1, -1):
            entry = tail[index]
            if not reached and entry.id == cursor:
                reached = True
            if entry.is_eligible_observation_source:
                message = entry.message
                assert message is not None
                messages += 1
                for call in message.tool_calls:
                    calls.add(call.id)
                    wanted.discard(call.id)
                if (
                    messages <= keep
                    and message.role == "tool"
                    and message.tool_call_id not in calls
                ):
                    wanted.add(message.tool_call_id or "")
                if not reached and budget is not None:
                    tokens += message.estimated_tokens
                    reached = tokens > budget
            if reached and messages > keep and not wanted:
                holds, older = True, index
                break
        else:
            older = 0
        self._walked = len(tail) - older
        self._messages, self._tokens, self._reached = messages, tokens, reached
        return holds
