"""What one flush did: the frozen result, its accumulator, and the token gate it reads."""

from __future__ import annotations

from collections.abc import Sequence

from om_core.ledger.models import Frozen, SessionEntry
from om_core.ledger.tokens import estimate_entry_tokens
from om_core.settings import ObservationalMemorySettings


class WorkerSkip(Frozen):
    """A step that did not run, and why (``missing_model``, ``below_threshold`` ...);
    ``detail`` says more where there is more to say (``12 of 10000 tokens``)."""

    worker: str
    reason: str
    detail: str | None = None

    def describe(self) -> str:
        """One line for a person: ``observer below threshold: 12 of 10000 tokens``."""
        reason = self.reason.replace("_", " ")
        return (
            f"{self.worker} {reason}: {self.detail}" if self.detail else f"{self.worker} {reason}"
        )


class FlushResult(Frozen):
    """What one flush did.

    ``error`` is set when a step failed closed (each step's text redacted and bounded to
    ``maxWorkerErrorBytes``, joined by ``; ``); a failed step wrote nothing, and later steps
    still ran unless an append was not visible at the leaf. ``observed_messages`` counts the
    messages the observer read (user/assistant/tool), whether or not it recorded anything.
    """

    ran: tuple[str, ...] = ()
    observed_messages: int = 0
    appended_entry_ids: tuple[str, ...] = ()
    observation_ids: tuple[str, ...] = ()
    reflection_ids: tuple[str, ...] = ()
    dropped_observation_ids: tuple[str, ...] = ()
    skipped: tuple[WorkerSkip, ...] = ()
    compacted: bool = False
    error: str | None = None

    @property
    def advanced(self) -> bool:
        """True when the flush appended any memory entry."""
        return bool(self.appended_entry_ids) or self.compacted

    @property
    def recorded(self) -> bool:
        """True when the flush recorded memory: an observation, a reflection, a drop or a
        compaction (a coverage marker alone, from an observer that found nothing, is not)."""
        return bool(
            self.observation_ids
            or self.reflection_ids
            or self.dropped_observation_ids
            or self.compacted
        )

    @property
    def note(self) -> str | None:
        """Why a flush that recorded nothing did nothing, ``; ``-joined: the observer that
        read messages and recorded nothing (``observer observed 3 messages, recorded
        nothing``), then each skipped step. ``None`` when it recorded memory or failed (then
        ``error`` says why)."""
        if self.recorded or self.error:
            return None
        parts = [skip.describe() for skip in self.skipped]
        if "observer" in self.ran:
            parts.insert(
                0, f"observer observed {self.observed_messages} messages, recorded nothing"
            )
        return "; ".join(parts) or None


class FlushState:
    """Accumulates one flush's result."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.observed_messages = 0
        self.appended: list[str] = []
        self.observations: list[str] = []
        self.reflections: list[str] = []
        self.dropped: list[str] = []
        self.skipped: list[WorkerSkip] = []
        self.compacted = False
        self.errors: list[str] = []

    def skip(self, worker: str, reason: str, detail: str | None = None) -> None:
        self.skipped.append(WorkerSkip(worker=worker, reason=reason, detail=detail))

    def result(self) -> FlushResult:
        return FlushResult(
            ran=tuple(self.ran),
            observed_messages=self.observed_messages,
            appended_entry_ids=tuple(self.appended),
            observation_ids=tuple(self.observations),
            reflection_ids=tuple(self.reflections),
            dropped_observation_ids=tuple(self.dropped),
            skipped=tuple(self.skipped),
            compacted=self.compacted,
            error="; ".join(self.errors) or None,
        )


def default_compaction_due(
    entries: Sequence[SessionEntry], settings: ObservationalMemorySettings
) -> bool:
    """The default token gate: tokens from the latest compaction on reach ``compactAfterTokens``."""
    return estimated_input_tokens(entries) >= settings.context.compact_after_tokens


def estimated_input_tokens(entries: Sequence[SessionEntry]) -> int:
    """:func:`estimate_entry_tokens` summed from the latest compaction entry (inclusive) on."""
    start = 0
    for index in range(len(entries) - 1, -1, -1):
        if entries[index].kind == "compaction":
            start = index
            break
    return sum(estimate_entry_tokens(e) for e in entries[start:])
