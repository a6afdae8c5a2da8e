"""Cursor paging over the current branch's user/assistant/tool messages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from om_core.errors import (
    InvalidInputError,
    NonMessageCursorError,
    OversizedPageError,
    UnknownCursorError,
)
from om_core.ledger.fold import is_eligible_observation_source
from om_core.ledger.models import Frozen, Message, SessionEntry
from om_core.policy.redaction import normalize_secrets, redact, scrub
from om_core.read.recall import redact_message
from om_core.read.window import render_message
from om_core.settings import DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT

Direction = Literal["forward", "backward"]
Detail = Literal["summary", "full"]
SUMMARY_CHARS = 280


class PageItem(Frozen):
    """One message of a page: always a summary line, the whole message with ``detail=full``."""

    entry_id: str
    role: str
    summary: str
    message: Message | None = None


class BranchPage(Frozen):
    """A page of messages in branch order; ``next_cursor`` continues in the same direction."""

    cursor: str
    direction: Direction
    items: tuple[PageItem, ...]
    next_cursor: str | None
    has_more: bool


def check_page_limit(limit: object) -> int:
    """``limit`` as an int in ``1..MAX_PAGE_LIMIT``, else :class:`OversizedPageError`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_LIMIT:
        raise OversizedPageError(f"page limit must be an integer in 1..{MAX_PAGE_LIMIT}: {limit!r}")
    return limit


def check_page_request(
    limit: object, direction: object, detail: object
) -> tuple[int, Direction, Detail]:
    """The page arguments, checked without looking at any entry: :class:`OversizedPageError`
    for a limit outside ``1..MAX_PAGE_LIMIT``, :class:`InvalidInputError` for an unknown
    direction or detail."""
    limit = check_page_limit(limit)
    if direction != "forward" and direction != "backward":
        raise InvalidInputError(f"direction must be forward or backward: {direction!r}")
    if detail != "summary" and detail != "full":
        raise InvalidInputError(f"detail must be summary or full: {detail!r}")
    return limit, direction, detail


def recall_branch_page(
    entries: Sequence[SessionEntry],
    cursor: str,
    limit: int = DEFAULT_PAGE_LIMIT,
    direction: Direction = "forward",
    detail: Detail = "summary",
    secrets: Iterable[str] = (),
) -> BranchPage:
    """Messages strictly after (``forward``) or before (``backward``) the cursor entry.

    Fails closed: a limit outside 1..100 raises :class:`OversizedPageError`, a cursor that is
    not on the branch :class:`UnknownCursorError`, a cursor that is not a user/assistant/tool
    message :class:`NonMessageCursorError`, an unknown direction or detail
    :class:`InvalidInputError`.
    """
    limit, direction, detail = check_page_request(limit, direction, detail)
    position = next((i for i, e in enumerate(entries) if e.id == cursor), None)
    if position is None:
        raise UnknownCursorError(f"cursor {cursor!r} is not an entry on the current branch")
    if not is_eligible_observation_source(entries[position]):
        raise NonMessageCursorError(f"cursor {cursor!r} is not a user/assistant/tool message")
    if direction == "forward":
        rest = [e for e in entries[position + 1 :] if is_eligible_observation_source(e)]
        chosen, has_more = rest[:limit], len(rest) > limit
        next_cursor = chosen[-1].id if chosen and has_more else None
    else:
        rest = [e for e in entries[:position] if is_eligible_observation_source(e)]
        chosen, has_more = rest[-limit:], len(rest) > limit
        next_cursor = chosen[0].id if chosen and has_more else None
    keys = normalize_secrets(secrets)
    return BranchPage(
        cursor=cursor,
        direction=direction,
        items=tuple(_item(e, detail, keys) for e in chosen),
        next_cursor=next_cursor,
        has_more=has_more,
    )


def _item(entry: SessionEntry, detail: Detail, secrets: tuple[str, ...]) -> PageItem:
    assert entry.message is not None
    # Redact before cutting, so that no prefix of a secret is left at the cut.
    line = redact(render_message(entry.message), secrets).replace("\n", " ")
    summary = line if len(line) <= SUMMARY_CHARS else line[: SUMMARY_CHARS - 1] + "…"
    return PageItem(
        entry_id=entry.id,
        role=entry.message.role,
        summary=scrub(summary, secrets),
        message=redact_message(entry.message, secrets) if detail == "full" else None,
    )
