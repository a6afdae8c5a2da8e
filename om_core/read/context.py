"""Context blocks for the next provider turn: memory, then the recent exact messages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Unpack

from om_core.ledger.models import (
    ContextBlock,
    Frozen,
    ObservationalMemoryLedger,
    SessionEntry,
)
from om_core.ledger.tokens import CHARS_PER_TOKEN, estimate_text_tokens
from om_core.policy.limits import MAX_RECENT_WINDOW_BYTES
from om_core.policy.redaction import normalize_secrets, scrub
from om_core.read.context_memory import ContextMemory, MemorySelection
from om_core.read.render import RenderedMemory
from om_core.read.tail_messages import TailMessages
from om_core.read.window import (
    render_message,
    render_recent_message_window,
    select_recent_message_entries,
    tool_units,
    window_line,
)
from om_core.settings import ObservationalMemorySettings, resolve_settings

MEMORY_BLOCK_ID = "observational-memory"
RECENT_BLOCK_ID = "recent-messages"


def build_context_blocks(
    entries: Sequence[SessionEntry],
    settings: ObservationalMemorySettings | None = None,
    invalidated_ids: Iterable[str] = (),
    secrets: Iterable[str] = (),
    **view: Unpack[MemorySelection],
) -> tuple[ContextBlock, ContextBlock]:
    """Render the ``observational-memory`` and ``recent-messages`` blocks of one branch.

    ``entries`` is the current branch (at least from the latest snapshot on, and covering
    the recent window); ``view`` says which memory (:class:`MemoryView`). Both blocks are
    always returned; their text may be empty. Raises the scope errors :class:`MemoryView`
    names.
    """
    resolved = settings or resolve_settings()
    recent = select_recent_message_entries(
        entries,
        resolved.context.recent_messages,
        resolved.context.recent_message_max_tokens,
    )
    recent_text, recent_ids = render_recent_message_window(recent, secrets)
    memory = ContextMemory(entries, invalidated_ids, secrets, view)
    memory_text = memory.render(_shown(recent, recent_ids))
    return (
        ContextBlock(id=MEMORY_BLOCK_ID, text=memory_text),
        ContextBlock(id=RECENT_BLOCK_ID, text=recent_text, entry_ids=recent_ids),
    )


def _shown(window: Sequence[SessionEntry], ids: Iterable[str]) -> list[SessionEntry]:
    """The entries of ``window`` a rendered block shows (by their ids)."""
    shown = set(ids)
    if len(shown) == len(window):
        return list(window)  # ids name entries of the window: all of them are shown
    return [e for e in window if e.id in shown]


# The service's context: every message memory does not cover yet, within a token budget.


class Unobserved(Frozen):
    """The messages memory does not cover yet: after the observation cursor, in branch order.

    ``messages`` and ``tokens`` (estimated) count user/assistant/tool messages; ``first_id``
    is the oldest of them (``None`` when memory covers everything).
    """

    messages: int = 0
    tokens: int = 0
    first_id: str | None = None


class ContextGap(Frozen):
    """Unobserved messages the budget left out of the recent block.

    ``messages`` and ``tokens`` count them; ``first_id`` is the oldest; page them backward
    from ``cursor`` (the oldest message the recent block shows).
    """

    messages: int
    tokens: int
    first_id: str
    cursor: str


class MemoryOmission(Frozen):
    """Memory items left out of the memory block, each still in reach: ``covered``
    observations under a reflection shown or listed (its recall returns their messages; they
    are left out at any budget, the reflection standing for them),
    ``listed`` by recall id in the block's note, ``unlisted`` only behind the note's paging
    cursor (when even the ids did not fit). ``unreflected`` counts the observations left out
    that no reflection has gone over yet: a flush with reflection would condense them."""

    items: int
    covered: int = 0
    listed: int = 0
    unlisted: int = 0
    unreflected: int = 0


class Context(Frozen):
    """What an agent's next turn gets: the memory block, the recent block (every unobserved
    message and at least the last ``context.recentMessages``, as the budget allows), what
    memory does not cover yet, the part of it the budget left out (``gap``), and the memory
    items the budget left out of the memory block (``omitted``)."""

    memory: ContextBlock
    recent: ContextBlock
    unobserved: Unobserved
    gap: ContextGap | None = None
    omitted: MemoryOmission | None = None
    max_tokens: int | None = None

    @property
    def blocks(self) -> tuple[ContextBlock, ContextBlock]:
        """The two blocks, memory first."""
        return self.memory, self.recent


MIN_CONTEXT_TOKENS = 256
"""The smallest budget a context can be fitted into (a heading, a note, one clipped message)."""

MEMORY_SHARE = 2
"""Memory takes at most ``1 / MEMORY_SHARE`` of the budget; recent messages the rest."""

CLIPPED_MARK = " …[clipped: {rest} more characters; the whole message is entry {id}]"


def build_context(
    entries: Sequence[SessionEntry],
    settings: ObservationalMemorySettings | None = None,
    invalidated_ids: Iterable[str] = (),
    secrets: Iterable[str] = (),
    *,
    max_tokens: int | None = None,
    older: Unobserved | None = None,
    **view: Unpack[MemorySelection],
) -> Context:
    """The context an agent server can replace its history with: nothing is out of sight.

    The recent block holds every message after the observation cursor (not only the last
    ``context.recentMessages``, which stay a floor), so a message is always either shown or
    covered by memory. ``entries`` is the branch from at least the observation cursor on
    (the whole branch in process); a store that reads only the newest part passes the
    unobserved messages before it as ``older`` (they are left out, and reported).

    With ``max_tokens`` (estimated tokens, at least :data:`MIN_CONTEXT_TOKENS`) memory is
    rendered within half the budget and recent messages fill the rest, oldest units (a call
    with its results) first to go; the newest unit is always shown, its text clipped with its
    entry id when it alone does not fit. Unobserved messages left out are reported as
    ``gap``, and the memory block names them with the cursor to page from.

    Memory is condensed (:func:`~om_core.read.render.render_reachable_memory`): an
    observation a reflection covers is not shown beside it, the reflection standing for it
    (one recall returns its messages), so memory grows with the reflections and the
    observations none has gone over yet, not with every observation made. Items that do not
    fit stay in reach too: the block's note lists the recall id of every other item left
    out; they are reported as ``omitted``. ``view`` says which memory
    (:class:`MemoryView`). Raises ``ValueError`` for a budget below the minimum, and the scope
    errors :class:`MemoryView` names.
    """
    check_budget(max_tokens)
    memory = ContextMemory(entries, invalidated_ids, secrets, view)
    return build_context_tail(entries, memory, settings, max_tokens=max_tokens, older=older)


def check_budget(max_tokens: int | None) -> None:
    """Raise ``ValueError`` for a token budget below :data:`MIN_CONTEXT_TOKENS`."""
    if max_tokens is not None and max_tokens < MIN_CONTEXT_TOKENS:
        raise ValueError(f"max_tokens must be at least {MIN_CONTEXT_TOKENS}, got {max_tokens}")


def build_context_tail(
    entries: Sequence[SessionEntry],
    memory: ContextMemory,
    settings: ObservationalMemorySettings | None = None,
    *,
    max_tokens: int | None = None,
    older: Unobserved | None = None,
    tail: TailMessages | None = None,
) -> Context:
    """:func:`build_context` from its memory part already built: ``memory`` is
    ``ContextMemory(entries, invalidated_ids, secrets, view)``, a function of the branch's
    memory alone, so one built before messages were appended serves after them as well
    (it keeps its rendering plans: the memory block is then fitted, not rendered again).
    ``entries`` must be the branch as :func:`build_context` takes it, memory records
    included, and ``memory`` of that branch's memory; the result is exactly
    :func:`build_context`'s. ``tail``: ``entries`` walked already, as ``TailMessages.of(entries,
    memory.ledger.observation_covers_up_to_id, earlier, memory.secrets)``, so a caller keeping
    the last walk of a branch walks only what was appended since. Raises
    ``ValueError`` for a budget below the minimum.
    """
    check_budget(max_tokens)
    resolved = settings or resolve_settings()
    if tail is None:
        tail = TailMessages.of(
            entries, memory.ledger.observation_covers_up_to_id, None, memory.secrets
        )
    unobserved = tail.messages_from(tail.observed)
    window = _window(entries, resolved, tail)
    if max_tokens is None:
        fitted = _unbudgeted(memory, window, unobserved, older)
    else:
        fitted = _within_budget(memory, window, max_tokens, unobserved, older)
    gap = fitted.gap
    return Context(
        memory=ContextBlock(id=MEMORY_BLOCK_ID, text=_with_gap_note(fitted.memory.text, gap)),
        recent=ContextBlock(id=RECENT_BLOCK_ID, text=fitted.recent, entry_ids=fitted.recent_ids),
        unobserved=_unobserved(unobserved, tail.tokens_from(tail.observed), older),
        gap=gap,
        omitted=_omission(fitted.memory, memory.ledger),
        max_tokens=max_tokens,
    )


@dataclass(frozen=True)
class _Window:
    """The messages the recent block may show; ``tail`` and ``start`` when they are
    ``tail.messages[start:]`` of a tail of runs, which then sizes them without a walk."""

    messages: list[SessionEntry]
    tail: TailMessages | None = None
    start: int = 0


def _window(
    entries: Sequence[SessionEntry], settings: ObservationalMemorySettings, tail: TailMessages
) -> _Window:
    """The messages the recent block may show: every unobserved one, and at least the last
    ``context.recentMessages`` (within their token cap only when nothing is unobserved)."""
    keep = max(settings.context.recent_messages, tail.unobserved)
    cap = None if tail.unobserved else settings.context.recent_message_max_tokens
    if not tail.runs:
        return _Window(list(select_recent_message_entries(entries, keep, cap)))
    start = tail.window_start(keep, cap)
    return _Window(tail.messages_from(start), tail, start)


@dataclass(frozen=True)
class _Fitted:
    """The two blocks' contents as fitted: memory, the recent text and the ids it shows."""

    memory: RenderedMemory
    recent: str
    recent_ids: tuple[str, ...]
    gap: ContextGap | None


def _unbudgeted(
    memory: ContextMemory,
    window: _Window,
    unobserved: Sequence[SessionEntry],
    older: Unobserved | None,
) -> _Fitted:
    recent, ids = _fitted_recent(window, memory.secrets, None)
    rendered = memory.render_reachable(_shown(window.messages, ids), None, _first(ids))
    return _Fitted(rendered, recent, ids, _gap(unobserved, older, ids, len(window.messages)))


def _within_budget(
    memory: ContextMemory,
    window: _Window,
    max_tokens: int,
    unobserved: Sequence[SessionEntry],
    older: Unobserved | None,
) -> _Fitted:
    """Memory first within half the budget, recent messages in what it leaves; then memory
    again for the messages actually shown, in what they leave (observations of messages the
    budget pushed out must show), so the two never exceed the budget together."""
    half = max_tokens // MEMORY_SHARE * CHARS_PER_TOKEN
    first = memory.render_reachable(window.messages, half, None)
    left = max_tokens - estimate_text_tokens(first.text)
    recent, ids = _fitted_recent(window, memory.secrets, left)
    gap = _gap(unobserved, older, ids, len(window.messages))
    note = estimate_text_tokens(gap_note(gap)) + 1 if gap is not None else 0
    room = (max_tokens - estimate_text_tokens(recent) - note) * CHARS_PER_TOKEN
    rendered = memory.render_reachable(_shown(window.messages, ids), max(0, room), _first(ids))
    return _Fitted(rendered, recent, ids, gap)


def _with_gap_note(memory: str, gap: ContextGap | None) -> str:
    if gap is None:
        return memory
    return f"{memory}\n\n{gap_note(gap)}" if memory else gap_note(gap)


def _first(ids: Sequence[str]) -> str | None:
    return ids[0] if ids else None


def _omission(rendered: RenderedMemory, ledger: ObservationalMemoryLedger) -> MemoryOmission | None:
    if not rendered.omitted_ids:
        return None
    pending = set(ledger.pending_reflection_observation_ids)
    return MemoryOmission(
        items=len(rendered.omitted_ids),
        covered=rendered.covered,
        listed=rendered.listed,
        unlisted=rendered.unlisted,
        unreflected=sum(1 for i in rendered.omitted_ids if i in pending),
    )


def _fitted_recent(
    window: _Window, secrets: Iterable[str], budget: int | None
) -> tuple[str, tuple[str, ...]]:
    """The recent block within ``budget`` tokens: oldest units out first, then the newest
    unit clipped with its entry id."""
    if budget is None:
        return render_recent_message_window(window.messages, secrets)
    room = max(budget, 1) * CHARS_PER_TOKEN
    keys = normalize_secrets(secrets)
    ids, lines = _newest_lines(window, room, keys)
    limit = min(room, MAX_RECENT_WINDOW_BYTES)
    while True:
        text = _clipped(ids, lines, limit, keys)
        # The window's byte cap holds too: shrink the room until the UTF-8 text fits it,
        # scaling the text's own length (the room may be far larger than the text).
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
        if size <= MAX_RECENT_WINDOW_BYTES or limit <= 0:
            return text, tuple(ids)
        limit = min(limit - 1, len(text) * MAX_RECENT_WINDOW_BYTES // size)


def _newest_lines(
    window: _Window, room: int, keys: tuple[str, ...]
) -> tuple[Sequence[str], Sequence[str]]:
    """The ids and texts (``keys`` redacted) of the window's messages in its newest units
    whose rendered text fits ``room`` characters (at least the last unit), in order."""
    tail = window.tail
    if tail is not None and tail.keys == keys:
        first = window.start
        if tail.rendered_size(first) > room:
            first = tail.newest_fitting(first, room)
        return tail.lines_from(first)
    units = tool_units([e for e in window.messages if e.message is not None])
    if _rendered_size(window.messages) > room:
        units = units[_newest_fitting(units, room) :]
    shown = [(e.id, m) for unit in units for e in unit if (m := e.message)]
    return [entry_id for entry_id, _ in shown], [window_line(m, keys) for _, m in shown]


def _rendered_size(window: Sequence[SessionEntry]) -> int:
    """Characters of the whole window as rendered (one newline between messages): when they
    fit, :func:`_newest_fitting` keeps every unit, and need not size them one by one."""
    return sum(len(e.message.rendered) + 1 for e in window if e.message is not None) - 1


def _newest_fitting(units: Sequence[Sequence[SessionEntry]], room: int) -> int:
    """The index of the oldest unit kept: the newest units whose text (as rendered: role tags,
    tool calls, one newline between lines) fits ``room`` characters, and at least the last.
    Sized newest first, so a long window costs what its kept part costs."""
    start, total = len(units), -1
    while start > 0:
        size = sum(len(render_message(e.message)) + 1 for e in units[start - 1] if e.message)
        if total + size > room:
            break
        start, total = start - 1, total + size
    return min(start, len(units) - 1) if units else 0


def _clipped(ids: Sequence[str], texts: Sequence[str], room: int, keys: tuple[str, ...]) -> str:
    """Rendered lines (of the entries ``ids``) cut to ``room`` characters in all (newlines
    included): the longest line is clipped first, each with a mark naming its entry and how
    many of its characters are not shown, so a small result beside a huge one stays whole."""
    lines = list(texts)
    clipped = [False] * len(lines)
    while sum(map(len, lines)) + len(lines) - 1 > room:
        candidates = [i for i in range(len(lines)) if not clipped[i]]
        if not candidates:
            # Marks alone outgrow the room (many parallel results in a tiny budget).
            return scrub("\n".join(lines)[: max(0, room)], keys)
        index = max(candidates, key=lambda i: len(lines[i]))
        whole = texts[index]
        over = sum(map(len, lines)) + len(lines) - 1 - room
        mark_size = len(CLIPPED_MARK.format(rest=len(whole), id=ids[index]))
        keep = max(0, len(whole) - over - mark_size)
        mark = CLIPPED_MARK.format(rest=len(whole) - keep, id=ids[index])
        lines[index] = scrub(whole[:keep], keys) + mark
        clipped[index] = True
    return "\n".join(lines)


def _unobserved(shown: Sequence[SessionEntry], tokens: int, older: Unobserved | None) -> Unobserved:
    before = older or Unobserved()
    first = before.first_id or (shown[0].id if shown else None)
    return Unobserved(
        messages=before.messages + len(shown), tokens=before.tokens + tokens, first_id=first
    )


def _gap(
    unobserved: Sequence[SessionEntry],
    older: Unobserved | None,
    shown_ids: Sequence[str],
    window: int,
) -> ContextGap | None:
    """The unobserved messages not shown: those before the window's (``older``) and those of
    the window left out (none when all ``window`` messages are shown, as is usual)."""
    if len(shown_ids) == window:
        left: list[SessionEntry] = []
    else:
        shown = set(shown_ids)
        left = [e for e in unobserved if e.id not in shown]
    before = older or Unobserved()
    messages = before.messages + len(left)
    if not messages or not shown_ids:
        return None
    first = before.first_id or left[0].id
    tokens = before.tokens + sum(m.estimated_tokens for e in left if (m := e.message) is not None)
    return ContextGap(messages=messages, tokens=tokens, first_id=first, cursor=shown_ids[0])


def gap_note(gap: ContextGap) -> str:
    """The memory block's line naming unobserved messages the budget left out."""
    return (
        f"({gap.messages} older messages, about {gap.tokens} tokens, are not in memory yet and "
        f"not shown here: page them backward from entry {gap.cursor}, oldest {gap.first_id})"
    )
