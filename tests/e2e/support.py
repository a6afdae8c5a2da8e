"""Helpers shared by the worker tests: sessions with chat, memory inspection, bounded waits."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import Message, SessionEntry
from om_workers.store import SqlStore

LOW: dict[str, Any] = {
    "observation": {"messageTokens": 1},
    "reflection": {"observationTokens": 1_000_000},
    "context": {"observationsPoolMaxTokens": 1_000_000},
}
"""Memory settings that observe every message and never reflect or drop (exact counting)."""


def add_chat(store: SqlStore, tenant: str, session: str, turns: int, start: int = 0) -> list[str]:
    """Append ``turns`` user/assistant pairs; returns the message entry ids."""
    entries = []
    for i in range(start, start + turns):
        pair: tuple[tuple[Literal["user", "assistant"], str], ...] = (
            ("user", f"Question {i}: what is the status of ticket {i} in project {session}?"),
            ("assistant", f"Ticket {i} is resolved, the fix was deployed on day {i} by the team."),
        )
        for role, text in pair:
            entries.append(
                SessionEntry(
                    id=f"{session}-m{i}-{role}",
                    session_id=session,
                    kind="message",
                    message=Message(role=role, content=text),
                )
            )
    store.append_entries(tenant, session, entries)
    return [e.id for e in entries]


def covered_sources(store: SqlStore, tenant: str, session: str) -> list[str]:
    """Every source entry id the session's observations cite, repeats kept."""
    ledger = fold_ledger(store.read_branch(tenant, session))
    return [sid for o in ledger.observations for sid in o.source_entry_ids]


def observation_ids(store: SqlStore, tenant: str, session: str) -> list[str]:
    return [o.id for o in fold_ledger(store.read_branch(tenant, session)).observations]


def fully_observed(store: SqlStore, tenant: str, session: str, messages: list[str]) -> bool:
    return set(messages) <= set(covered_sources(store, tenant, session))


def wait_for(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    detail: Callable[[], object] | None = None,
) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout_s`` seconds (the
    timeout only bounds a failing test; nothing asserts how fast it came true)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    if not condition():
        extra = f": {detail()}" if detail is not None else ""
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{extra}")


def assert_observed_once(store: SqlStore, tenant: str, session: str, messages: list[str]) -> None:
    """Every message cited by exactly one observation, nothing else cited, no id twice."""
    sources = Counter(covered_sources(store, tenant, session))
    assert {m for m, n in sources.items() if n > 1} == set(), "a source entry observed twice"
    assert set(sources) == set(messages), "coverage has a gap"
    ids = Counter(observation_ids(store, tenant, session))
    assert all(n == 1 for n in ids.values()), "an observation id recorded twice"
