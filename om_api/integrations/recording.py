"""What the framework adapters of an agent's memory share: the session they stand on, with its
context budget, and what recording a run's messages did."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from om_api.client import AsyncOMClient, OMClient
from om_api.schemas import AppendEntriesResponse, FlushTicket

ClientT = TypeVar("ClientT", OMClient, AsyncOMClient)


@dataclass
class SessionMemory(Generic[ClientT]):
    """One om session as an agent's memory, read and recorded through ``client``.

    ``max_tokens`` is the context budget in the service's estimated tokens (about four
    characters each; 256 to 1,000,000), ``None`` for the server's default. When unobserved
    messages do not fit, the oldest are left out and the memory block says how many (the
    service requests a flush for them).
    """

    client: ClientT
    session_id: str
    max_tokens: int | None = None


@dataclass(frozen=True)
class Recorded:
    """What ``ObservationalMemory.record`` did: the append's answer (``duplicate_ids`` are
    messages recorded before) and the flush job it requested."""

    append: AppendEntriesResponse
    flush: FlushTicket
