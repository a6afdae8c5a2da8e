"""What recording an agent run's messages did, shared by the framework adapters."""

from __future__ import annotations

from dataclasses import dataclass

from om_api.schemas import AppendEntriesResponse, FlushTicket


@dataclass(frozen=True)
class Recorded:
    """What ``ObservationalMemory.record`` did: the append's answer (``duplicate_ids`` are
    messages recorded before) and the flush job it requested."""

    append: AppendEntriesResponse
    flush: FlushTicket
