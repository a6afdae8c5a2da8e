"""What the read routes answer: context, recall, message pages, search, status and view."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from om_api.schemas.base import RequestModel, WireModel
from om_api.schemas.entries import EntryOut, MessageOut


class ContextBlockOut(WireModel):
    """A block of provider context: ``observational-memory`` (no ``entry_ids``) or
    ``recent-messages`` (with the ids of the exact messages it shows)."""

    id: Literal["observational-memory", "recent-messages"]
    text: str
    entry_ids: list[str] | None = None


MAX_CONTEXT_TOKENS = 1_000_000
"""The largest budget a context read accepts (estimated tokens)."""


class UnobservedOut(WireModel):
    """Messages memory does not cover yet (shown in the recent block unless ``gap`` says
    otherwise): how many, their estimated tokens, the oldest one's id."""

    messages: int
    tokens: int
    first_id: str | None = None


class GapOut(WireModel):
    """Unobserved messages the token budget left out: page them backward from ``cursor``
    (``GET .../messages?cursor=...&direction=backward``). A flush was requested for them."""

    messages: int
    tokens: int
    first_id: str
    cursor: str


class ContextOut(WireModel):
    """``GET .../context``: always two blocks, memory first; either text may be empty.

    Every message is either covered by memory or in the recent block, unless the budget
    (``max_tokens``, estimated tokens) left older unobserved ones out: ``gap`` then names
    them, and the memory block says so too.
    """

    blocks: list[ContextBlockOut]
    unobserved: UnobservedOut
    gap: GapOut | None = None
    max_tokens: int

    def as_text(self) -> str:
        """The memory block, then the recent-messages block under a heading, as one text for a
        model's prompt; ``""`` when the session holds nothing yet."""
        memory, recent = self.blocks
        sections = [memory.text] if memory.text else []
        if recent.text:
            sections.append(f"## Recent messages\n\n{recent.text}")
        return "\n\n".join(sections)


class ObservationOut(WireModel):
    """A source-backed observation."""

    id: str
    text: str
    source_entry_ids: list[str]
    relevance: float
    observed_at: str | None = None


class RecallOut(WireModel):
    """``GET .../memory/{memory_id}``: what a memory id rests on (the core's recall result).

    ``found`` is false for an unknown id (``reason: not_found``) and a revoked one
    (``reason: revoked``, no derived text). For a reflection, supporting observations come
    from the full ledger; dropped supports still contribute their sources.
    """

    id: str
    kind: Literal["observation", "reflection"] | None
    found: bool
    reason: Literal["not_found", "revoked"] | None
    text: str | None
    dropped: bool
    source_entry_ids: list[str]
    missing_source_entry_ids: list[str]
    sources: list[EntryOut]
    supporting_observations: list[ObservationOut]
    supporting_observation_ids: list[str]
    dropped_supporting_observation_ids: list[str]
    missing_supporting_observation_ids: list[str]


class PageItemOut(WireModel):
    """One message of a branch page; ``message`` only with ``detail=full``."""

    entry_id: str
    role: str
    summary: str
    message: MessageOut | None = None


class MessagesPage(WireModel):
    """``GET .../messages``: messages strictly after (``forward``) or before (``backward``)
    ``cursor``; ``next_cursor`` continues in the same direction while ``has_more``."""

    cursor: str
    direction: Literal["forward", "backward"]
    items: list[PageItemOut]
    next_cursor: str | None
    has_more: bool


class SearchHitOut(WireModel):
    """One search hit: an entry id (``kind`` ``message``) or an observation/reflection id
    (recall it by id for the exact sources), its session, a snippet with the matches between
    ``«`` and ``»`` (secrets redacted), the relevance ``score`` (higher is better; comparable
    within one search only), the entry's time and, for memory, the ids it rests on."""

    id: str
    session_id: str
    kind: Literal["message", "observation", "reflection"]
    snippet: str
    score: float
    created_at: str | None = None
    source_ids: list[str] | None = None


class SearchPage(WireModel):
    """``GET /v1/search``, ``GET .../search``: hits best first; ``next_cursor`` (``null`` at the
    end) continues the same order. A page may be shorter than ``limit`` when hits were
    withheld from it."""

    hits: list[SearchHitOut]
    next_cursor: str | None


class StatusOut(WireModel):
    """``GET .../status`` (om:status): session-local memory counts and the rendered text."""

    recorded_observations: int
    dropped_observations: int
    active_observations: int
    visible_observations: int
    recorded_reflections: int
    visible_reflections: int
    active_pool_tokens: int
    visible_pool_tokens: int
    pool_max_tokens: int
    in_flight: bool
    last_error: str | None
    text: str


class ViewOut(WireModel):
    """``GET .../view`` (om:view): rendered memory, ``visible`` (default) or ``full``."""

    mode: Literal["visible", "full"]
    text: str


class CompactRequest(RequestModel):
    """``POST .../compact`` (the body is optional): how many recent messages stay verbatim."""

    keep_recent_entries: int = Field(default=8, ge=0, le=1000)
