"""7. Memory fidelity with the extractive provider: a ~100k-token synthetic session with 50
planted facts. Share of facts in the context blocks, or recallable from a memory id shown in
them; and the context size against the raw history's (compression ratio)."""

from __future__ import annotations

import random
import re
from itertools import count

from om_core import (
    ExtractiveProvider,
    Message,
    ObservationalMemoryRuntime,
    SessionEntry,
    WorkerConfig,
    build_context_blocks,
    estimate_entry_tokens,
    recall_memory,
    resolve_settings,
)
from om_core.tokens import estimate_text_tokens

from .common import Section

FACTS = 50
TARGET_TOKENS = 100_000
RUN_MESSAGES = 20
MEMORY_REF = re.compile(r"\[(om|reflection):([a-f0-9]{12})\]")
FILLER = [
    "Let's look at the build logs for the staging deploy before lunch.",
    "The dashboard shows the latency graph for the last seven days in detail.",
    "I ran the migration on a copy of the database and it took four minutes.",
    "Can you summarize what changed in the payment service this sprint?",
    "The flaky test in the checkout suite failed again on the nightly run.",
    "We should rename the config flag so it matches the documentation wording.",
]


class _Session:
    def __init__(self) -> None:
        self.id = "fidelity"
        self.entries: list[SessionEntry] = []
        self._ids = count(1)

    def get_entries(self) -> list[SessionEntry]:
        return list(self.entries)

    def append(self, entry: SessionEntry) -> None:
        self.entries.append(entry)

    def say(self, role: str, text: str) -> None:
        parent = self.entries[-1].id if self.entries else None
        self.append(
            SessionEntry(
                id=f"m{next(self._ids)}",
                session_id=self.id,
                parent_id=parent,
                kind="message",
                message=Message(role=role, content=text),  # type: ignore[arg-type]
            )
        )


def measure(settings_json: dict[str, object], seed: int = 7) -> dict[str, float]:
    """Run the session under ``settings_json``; return recall share and token figures."""
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
    )
    codes = [f"VX-{rnd.randint(1000, 9999)}-{k}" for k in range(FACTS)]
    raw_tokens = 0
    plant_every = max(1, TARGET_TOKENS // 20 // FACTS)  # 17-18 tokens a message: all 50 fit
    planted = 0
    turn = 0
    while raw_tokens < TARGET_TOKENS:
        for _ in range(RUN_MESSAGES):
            turn += 1
            if turn % plant_every == 0 and planted < FACTS:
                text = f"Remember: the vault code for project {planted} is {codes[planted]}."
                planted += 1
            else:
                text = f"{rnd.choice(FILLER)} (turn {turn})"
            session.say("user" if turn % 2 else "assistant", text)
            raw_tokens += estimate_entry_tokens(session.entries[-1])
        runtime.flush()
    memory, recent = build_context_blocks(session.entries, settings)
    shown = memory.text + "\n" + recent.text
    recallable = "\n".join(_recalled_texts(session.entries, memory.text))
    kept = sum(1 for code in codes[:planted] if code in shown or code in recallable)
    context_tokens = estimate_text_tokens(memory.text) + estimate_text_tokens(recent.text)
    return {
        "planted": planted,
        "kept": kept,
        "raw_tokens": raw_tokens,
        "context_tokens": context_tokens,
    }


def _recalled_texts(entries: list[SessionEntry], memory_text: str) -> list[str]:
    texts = []
    for _, memory_id in MEMORY_REF.findall(memory_text):
        result = recall_memory(entries, memory_id)
        texts += [e.message.text for e in result.sources if e.message is not None]
    return texts


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
            f"context tokens ({label})",
            figures["context_tokens"],
            "tokens",
            "raw history tokens",
            figures["raw_tokens"],
        )
    section.notes.append(
        "A fact counts when its code appears in the context blocks or in the raw messages a "
        "memory id shown in them recalls. Planted facts carry a 'Remember:' cue that the "
        "extractive heuristic scores up; a model would be judged on its own terms."
    )
    return section
