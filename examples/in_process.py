"""A one-minute tour of the in-process core: append, flush, context, recall.

Run with ``.venv/bin/python examples/in_process.py``. The offline ``ExtractiveProvider`` stands in
for a model (a deterministic heuristic, no key needed); any ``Provider`` speaks the same tools.
"""

from __future__ import annotations

from itertools import count

from om_core import (
    ExtractiveProvider,
    Message,
    ObservationalMemoryRuntime,
    SessionEntry,
    WorkerConfig,
    build_context_blocks,
    recall_memory,
    resolve_settings,
)


class Session:
    """The smallest host session: an id, a linear branch and an append callback."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
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


def main() -> None:
    session = Session("demo")
    settings = resolve_settings(
        {"observation": {"messageTokens": 50}, "context": {"recentMessages": 4}}
    )
    runtime = ObservationalMemoryRuntime(
        session,
        append_entry=session.append,
        settings=settings,
        observation=WorkerConfig(provider=ExtractiveProvider()),
        session_model="extractive",
    )
    for day in range(1, 6):
        session.say("user", f"Day {day}: please deploy build {100 + day} to staging.")
        session.say("assistant", f"Deployed build {100 + day} to staging; all checks passed.")
        runtime.flush()

    memory, recent = build_context_blocks(session.get_entries(), settings)
    print(memory.text, "\n")
    print(recent.text, "\n")
    first = runtime.ledger().observations[0]
    recalled = recall_memory(session.get_entries(), f"om:{first.id}")
    print(f"om:{first.id} rests on:", [e.message.text for e in recalled.sources if e.message])


if __name__ == "__main__":
    main()
