"""7. Memory fidelity with the extractive provider: a ~100k-token synthetic session with 50
planted facts, placed where real facts sit (after a short opener, deep in a multi-line tool
output, said with a relative date). Share of facts in the context or recallable from a memory
id the context shows or lists; messages neither shown nor one recall away; and the context
size against the raw history's (compression ratio)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import datetime, timedelta
from itertools import count
from typing import Any

from om_core import (
    ExtractiveProvider,
    Message,
    ObservationalMemoryRuntime,
    SessionEntry,
    WorkerConfig,
    estimate_entry_tokens,
    recall_memory,
    resolve_settings,
)
from om_core.ledger.fold import is_eligible_observation_source
from om_core.ledger.models import ObservationalMemoryLedger, Role, ToolCall
from om_core.ledger.tokens import estimate_text_tokens
from om_core.read.context import build_context
from om_core.read.render import memory_refs
from om_workers.config import DEFAULT_CONTEXT_MAX_TOKENS

from .common import Section

FACTS = 50
TARGET_TOKENS = 100_000
RUN_MESSAGES = 20
TOOL_FILLER_EVERY = 23  # a tool call without a fact now and then: facts are not the only logs
START = datetime(2024, 1, 8, 9, 0)
FILLER = [
    "Let's look at the build logs for the staging deploy before lunch.",
    "The dashboard shows the latency graph for the last seven days in detail.",
    "I ran the migration on a copy of the database and it took four minutes.",
    "Can you summarize what changed in the payment service this sprint?",
    "The flaky test in the checkout suite failed again on the nightly run.",
    "We should rename the config flag so it matches the documentation wording.",
]
LOG_LINES = [
    "fetching config from the settings service",
    "resolved 14 packages in 2.3s",
    "running 212 tests on 4 workers",
    "cache hit ratio 0.87 for the build layer",
    "wrote artifact build/app.tar.gz (18 MB)",
    "health check passed on port 8080",
    "retrying upload after a timeout (attempt 2 of 3)",
    "warning: deprecated option --legacy-peer-deps",
]
OPENERS = ["Hey!", "Thanks.", "Sure thing.", "Morning!", "Got it.", "Oh, and one more thing."]
FACT_WORDING = [
    "the vault code for project {k} is {code}.",
    "project {k} uses vault code {code}.",
    "for project {k}, the vault code is {code}.",
]
RELATIVE = [
    "Last week we changed the vault code for project {k} to {code}.",
    "Tomorrow the vault code for project {k} becomes {code}.",
    "Two days ago ops set the vault code for project {k} to {code}.",
    "Next Monday project {k} switches to vault code {code}.",
]
PLACEMENTS = ("opener", "tool output", "relative date")


class _Session:
    def __init__(self) -> None:
        self.id = "fidelity"
        self.entries: list[SessionEntry] = []
        self._ids = count(1)
        self._calls = count(1)

    def get_entries(self) -> list[SessionEntry]:
        return list(self.entries)

    def append(self, entry: SessionEntry) -> None:
        self.entries.append(entry)

    def now(self) -> str:
        """The newest message's time (what memory records carry as their date)."""
        return self.entries[-1].created_at or "" if self.entries else ""

    def say(self, role: Role, text: str, **message: object) -> int:
        """Append a message (one minute after the last); return its estimated tokens."""
        index = next(self._ids)
        parent = self.entries[-1].id if self.entries else None
        stamp = (START + timedelta(minutes=index)).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.append(
            SessionEntry(
                id=f"m{index}",
                session_id=self.id,
                parent_id=parent,
                kind="message",
                created_at=stamp,
                message=Message(role=role, content=text, **message),  # type: ignore[arg-type]
            )
        )
        return estimate_entry_tokens(self.entries[-1])

    def tool(self, rnd: random.Random, lines: list[str]) -> int:
        """An assistant call and its multi-line result; return their estimated tokens."""
        call = ToolCall(id=f"call{next(self._calls)}", name="shell", arguments={"cmd": "logs"})
        tokens = self.say("assistant", "Let me check the logs.", tool_calls=(call,))
        output = "\n".join(lines)
        return tokens + self.say("tool", output, tool_call_id=call.id, tool_name="shell")


def plant(session: _Session, rnd: random.Random, placement: str, k: int, code: str) -> int:
    """Say fact ``k`` the way ``placement`` says it; return the estimated tokens added."""
    if placement == "opener":
        fact = rnd.choice(FACT_WORDING).format(k=k, code=code)
        return session.say("user", f"{rnd.choice(OPENERS)} {fact[0].upper()}{fact[1:]}")
    if placement == "tool output":
        lines = rnd.sample(LOG_LINES, rnd.randint(4, 6))
        lines.insert(rnd.randint(2, len(lines)), f"vault code for project {k}: {code}")
        return session.tool(rnd, lines)
    return session.say("user", rnd.choice(RELATIVE).format(k=k, code=code))


def measure(settings_json: Mapping[str, Any], seed: int = 7) -> dict[str, float]:
    """Run the session under ``settings_json``; return recall shares and token figures."""
    rnd = random.Random(seed)
    settings = resolve_settings(settings_json)
    session = _Session()
    runtime = ObservationalMemoryRuntime(
        session,
        append_entry=session.append,
        settings=settings,
        observation=WorkerConfig(provider=ExtractiveProvider()),
        dropper=WorkerConfig(provider=ExtractiveProvider()),
        session_model="extractive",
        now=session.now,
    )
    codes = [f"VX-{rnd.randint(1000, 9999)}-{k}" for k in range(FACTS)]
    placements = [PLACEMENTS[k % len(PLACEMENTS)] for k in range(FACTS)]
    rnd.shuffle(placements)
    raw_tokens = 0
    planted = 0
    turn = 0
    while raw_tokens < TARGET_TOKENS:
        for _ in range(RUN_MESSAGES):
            turn += 1
            # Fact k once the history holds k+1 / (FACTS+1) of the target: evenly spread.
            if planted < FACTS and raw_tokens >= (planted + 1) * TARGET_TOKENS // (FACTS + 1):
                raw_tokens += plant(session, rnd, placements[planted], planted, codes[planted])
                planted += 1
            elif turn % TOOL_FILLER_EVERY == 0:
                raw_tokens += session.tool(rnd, rnd.sample(LOG_LINES, rnd.randint(3, 6)))
            else:
                role: Role = "user" if turn % 2 else "assistant"
                raw_tokens += session.say(role, f"{rnd.choice(FILLER)} (turn {turn})")
        runtime.flush()
    ledger = runtime.ledger()
    context = build_context(
        session.entries, settings, ledger=ledger, max_tokens=DEFAULT_CONTEXT_MAX_TOKENS
    )
    memory, recent = context.blocks
    shown = memory.text + "\n" + recent.text
    recalled = _recalled(session.entries, memory.text, ledger)
    recallable = "\n".join(e.message.text for e in recalled if e.message is not None)
    # Reachable as an agent reaches it: shown in the recent block, or returned by one recall
    # of a memory id the memory block shows or lists.
    reachable = set(recent.entry_ids or ()) | {e.id for e in recalled}
    messages = [e for e in session.entries if is_eligible_observation_source(e)]
    figures: dict[str, float] = {
        "planted": planted,
        "kept": sum(1 for c in codes[:planted] if c in shown or c in recallable),
        "shown": sum(1 for c in codes[:planted] if c in shown),
        "raw_tokens": raw_tokens,
        "context_tokens": estimate_text_tokens(memory.text) + estimate_text_tokens(recent.text),
        "gap_messages": context.gap.messages if context.gap else 0,
        "messages": len(messages),
        "out_of_reach": sum(1 for e in messages if e.id not in reachable),
        "memory_omitted": context.omitted.items if context.omitted else 0,
        "memory_covered": context.omitted.covered if context.omitted else 0,
        "memory_listed": context.omitted.listed if context.omitted else 0,
    }
    for placement in PLACEMENTS:
        mine = [c for c, p in zip(codes[:planted], placements, strict=False) if p == placement]
        figures[f"{placement} planted"] = len(mine)
        figures[f"{placement} kept"] = sum(1 for c in mine if c in shown or c in recallable)
    return figures


def _recalled(
    entries: list[SessionEntry], memory_text: str, ledger: ObservationalMemoryLedger
) -> list[SessionEntry]:
    """The messages one recall of each memory id the block shows or lists returns."""
    found: dict[str, SessionEntry] = {}
    for ref in memory_refs(memory_text):
        result = recall_memory(entries, ref, ledger=ledger)
        found.update((e.id, e) for e in result.sources)
    return list(found.values())


def run() -> Section:
    section = Section("7. Memory fidelity, extractive provider (~100k-token session)")
    for label, settings_json in (
        ("defaults", {}),
        ("messageTokens 2,000", {"observation": {"messageTokens": 2_000}}),
    ):
        figures = measure(settings_json)
        share = figures["kept"] / figures["planted"]
        name = f"facts reachable ({label}, {figures['planted']:.0f} planted)"
        section.add(name, share * 100, "%", "planted facts", 100.0)
        section.add(
            f"facts in the context text ({label})",
            figures["shown"] / figures["planted"] * 100,
            "%",
            "planted facts",
            100.0,
        )
        section.add(
            f"messages neither shown nor one recall away ({label})",
            figures["out_of_reach"],
            "messages",
            "messages",
            figures["messages"],
        )
        section.add(
            f"context tokens ({label})",
            figures["context_tokens"],
            "tokens",
            "raw history tokens",
            figures["raw_tokens"],
        )
        by_placement = ", ".join(
            f"{p} {figures[f'{p} kept']:.0f}/{figures[f'{p} planted']:.0f}" for p in PLACEMENTS
        )
        section.notes.append(
            f"{label}: reachable by placement: {by_placement}; compression (context / raw "
            f"tokens) {figures['context_tokens'] / figures['raw_tokens']:.3f}; "
            f"{figures['gap_messages']:.0f} unobserved messages left out by the budget; "
            f"{figures['memory_omitted']:.0f} memory items left out of the memory block "
            f"({figures['memory_covered']:.0f} under a reflection, "
            f"{figures['memory_listed']:.0f} listed by id in its note)."
        )
    section.notes.append(
        "Facts are said without a cue, evenly and in seeded random order in three placements: "
        "after a short opener ('Hey! ...', 'Thanks. ...'), on the third line or later of a "
        "multi-line tool output, and with a relative date ('last week', 'tomorrow'; only the "
        "code is scored, not an anchored date); tool outputs without facts are mixed in too. "
        "The context is build_context's at the service's default budget "
        f"({DEFAULT_CONTEXT_MAX_TOKENS:,} tokens). A fact counts as reachable when its code "
        "appears in the context blocks or in the raw messages one recall of a memory id the "
        "memory block shows or lists returns; 'in the context text' counts only the blocks. "
        "A message is reachable the same way: shown in the recent block, or returned by one "
        "recall (a message behind a paging cursor is not)."
    )
    return section
