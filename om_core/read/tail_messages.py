"""The messages of a branch tail, walked once for a context build.

A context build asks a few questions of the tail it is given: which messages memory does not
cover yet (after the observation cursor), which form the recent window (those, or at least the
last ``context.recentMessages``, never splitting a tool call from its results), how large the
window renders, and which of its oldest units (a call with its results) to leave out to fit a
budget. Asked of the entries themselves, each question walked the tail again, read after read.
:class:`TailMessages` walks it once and answers each from prefix sums; given the walk of the
branch's previous tail (a tail is mostly the previous one plus the turn's messages), it walks
only the entries appended since. Walks of one branch share their columns, which only the
newest walk appends to, so going on from a walk copies nothing.

It answers only for a tail whose tool units are *runs*: every result comes right after its
call (the latest of its id) or after another result of the same call, and no tool message
makes calls. Agent runs have that shape. For any other tail ``runs`` is ``False``, and the
caller selects from the entries (:func:`~om_core.read.window.select_recent_message_entries`,
:func:`~om_core.read.window.tool_units`), whose answers these equal wherever both apply.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from om_core.ledger.models import Message, SessionEntry
from om_core.policy.redaction import normalize_secrets
from om_core.read.window import window_line

EXTEND_SCAN = 64
"""Entries looked through, from the newest, for the last one an earlier walk ended on."""


class _Columns:
    """What the walks of one branch know of its messages, in walk order; appended to only by
    the newest walk (under ``lock``), so an older walk's part never changes.

    ``ordinals[e]`` counts the messages before the ``e``-th entry walked; ``sizes[m]`` and
    ``tokens[m]`` the rendered characters (plus a newline each) and estimated tokens of the
    messages before the ``m``-th; ``back[m]`` how far before message ``m`` its call is (0:
    none); ``calls`` the message of each call id (the latest)."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.lock = threading.Lock()
        self.ordinals = [0]
        self.messages: list[SessionEntry] = []
        self.ids: list[str] = []
        self.lines: list[str] = []
        self.sizes = [0]
        self.tokens = [0]
        self.back: list[int] = []
        self.calls: dict[str, int] = {}

    def add(self, entry: SessionEntry, message: Message, origin: int) -> bool:
        """Append a message; ``False`` when it breaks a run: a result apart from its call's
        (one whose call is before message ``origin``, the tail's first, is alone), or a tool
        message that makes calls."""
        at = len(self.messages)
        call = self.calls.get(message.tool_call_id or "") if message.role == "tool" else None
        runs = call is None or call < origin or call in (at - 1, at - 1 - self.back[-1])
        for tool_call in message.tool_calls:
            runs = runs and message.role != "tool"
            self.calls[tool_call.id] = at
        self.back.append(0 if call is None else at - call)
        self.messages.append(entry)
        self.ids.append(entry.id)
        self.lines.append(window_line(message, self.keys))
        self.sizes.append(self.sizes[-1] + len(message.rendered) + 1)
        self.tokens.append(self.tokens[-1] + message.estimated_tokens)
        return runs


@dataclass(frozen=True)
class TailMessages:
    """The user/assistant/tool messages of a tail, in branch order, with prefix sums: the
    entries ``first`` to ``end`` of a branch's :class:`_Columns`.

    Messages are numbered from 0, the tail's first. ``keys``: the secrets its lines redact.
    ``cursor_at``: where the observation ``cursor`` was walked (``None``: not walked).
    ``runs``: the tail's units are runs (see the module). Immutable: :meth:`of` makes a new
    walk and leaves this one as it is.
    """

    columns: _Columns
    first: int
    end: int
    cursor: str | None
    cursor_at: int | None
    runs: bool
    newest: SessionEntry | None

    @classmethod
    def of(
        cls,
        entries: Sequence[SessionEntry],
        cursor: str | None,
        earlier: TailMessages | None = None,
        secrets: Iterable[str] = (),
    ) -> TailMessages:
        """Walk ``entries`` (a branch tail); ``cursor``: the observation cursor's id;
        ``secrets``: redacted from the lines. ``earlier``, a walk of an earlier tail of the
        same branch, is gone on from instead when ``entries`` hold its newest entry object
        (the entries before it are then its ancestors, as before): only those after are
        walked."""
        keys = normalize_secrets(secrets)
        if earlier is not None and (earlier.cursor, earlier.keys) == (cursor, keys):
            continued = earlier._continued(entries)
            if continued is not None:
                return continued
        fresh = cls(_Columns(keys), 0, 0, cursor, None, True, None)
        with fresh.columns.lock:
            return fresh._appended(entries, 0)

    @property
    def walked(self) -> int:
        """Entries its columns hold (this tail's, those it left behind and any walked after
        it): what keeping it costs, roughly."""
        return len(self.columns.ordinals) - 1

    @property
    def keys(self) -> tuple[str, ...]:
        """The secrets the lines redact (normalized)."""
        return self.columns.keys

    def _continued(self, entries: Sequence[SessionEntry]) -> TailMessages | None:
        """This walk gone on to ``entries``; ``None`` when they do not hold its newest entry,
        reach back past its first, when another walk went on from it already, or when what
        the tail left behind outgrows it (a new walk then lets the columns go)."""
        columns, newest = self.columns, self.newest
        if newest is None:
            return None
        last = len(entries) - 1
        found = next(
            (j for j in range(last, max(-1, last - EXTEND_SCAN), -1) if entries[j] is newest),
            None,
        )
        if found is None or self.end - 1 - found < self.first:
            return None  # not found, or a tail reaching back past this one's: walked anew
        first = self.end - 1 - found
        if columns.ordinals[first] > columns.ordinals[self.end] - columns.ordinals[first]:
            return None
        with columns.lock:
            if len(columns.ordinals) - 1 != self.end:
                return None  # not the newest walk: its columns went on elsewhere
            return self._appended(entries[found + 1 :], first)

    def _appended(self, entries: Sequence[SessionEntry], first: int) -> TailMessages:
        """The walk from entry ``first`` through this one's and ``entries`` (the caller holds
        the columns' lock, and this is the newest walk)."""
        c = self.columns
        cursor, cursor_at, runs, newest = self.cursor, self.cursor_at, self.runs, self.newest
        origin = c.ordinals[first]
        for index, entry in enumerate(entries, start=self.end):
            message = entry.message
            if message is not None and entry.is_eligible_observation_source:
                runs = c.add(entry, message, origin) and runs
            c.ordinals.append(len(c.messages))
            if entry.id == cursor:
                cursor_at = index  # the last occurrence wins, as a search from the end
            newest = entry
        end = len(c.ordinals) - 1
        return TailMessages(c, first, end, cursor, cursor_at, runs, newest)

    @property
    def _bounds(self) -> tuple[int, int]:
        """The tail's messages in the columns: ``[lo, hi)``."""
        return self.columns.ordinals[self.first], self.columns.ordinals[self.end]

    @property
    def count(self) -> int:
        """The tail's messages."""
        lo, hi = self._bounds
        return hi - lo

    @property
    def observed(self) -> int:
        """Messages up to the observation cursor (all of the tail's are after it when it is
        ``None`` or not in the tail)."""
        at = self.cursor_at
        if at is None or at < self.first:
            return 0
        return self.columns.ordinals[at + 1] - self.columns.ordinals[self.first]

    @property
    def unobserved(self) -> int:
        """Messages after the observation cursor."""
        return self.count - self.observed

    def messages_from(self, start: int) -> list[SessionEntry]:
        """The messages from the ``start``-th on."""
        lo, hi = self._bounds
        return self.columns.messages[lo + start : hi]

    def lines_from(self, start: int) -> tuple[list[str], list[str]]:
        """The ids and lines (see :attr:`keys`) of the messages from the ``start``-th on."""
        lo, hi = self._bounds
        return self.columns.ids[lo + start : hi], self.columns.lines[lo + start : hi]

    def tokens_from(self, start: int) -> int:
        """Estimated tokens of the messages from the ``start``-th on."""
        lo, hi = self._bounds
        return self.columns.tokens[hi] - self.columns.tokens[lo + start]

    def rendered_size(self, start: int) -> int:
        """Characters of the messages from ``start`` on as rendered, one newline between each."""
        return self._chars(start, self.count) - 1

    def _chars(self, start: int, stop: int) -> int:
        lo = self._bounds[0]
        return self.columns.sizes[lo + stop] - self.columns.sizes[lo + start]

    def _first_of_unit(self, index: int) -> int:
        back = self.columns.back[self._bounds[0] + index]
        return index - back if back <= index else index  # a call cut off: a unit of its own

    def window_start(self, keep: int, max_tokens: int | None = None) -> int:
        """Where the recent window begins: the index of its first message, as
        :func:`~om_core.read.window.select_recent_message_entries` (``keep``, ``max_tokens``)
        selects it (:attr:`count` for an empty window). Needs :attr:`runs`."""
        count = self.count
        if keep <= 0:
            if keep < 0:
                raise ValueError("keep must be >= 0")
            return count
        start = max(0, count - keep)
        if start < count:
            start = self._first_of_unit(start)  # a result's call comes with it
        if max_tokens is None:
            return start
        firsts = [i for i in range(start, count) if self._first_of_unit(i) == i]
        total = self.tokens_from(start)
        for first, following in pairwise(firsts):
            if total <= max_tokens:
                return first
            total -= self.tokens_from(first) - self.tokens_from(following)
        return firsts[-1] if firsts else start

    def newest_fitting(self, start: int, room: int) -> int:
        """The first message kept when only the newest units from ``start`` on whose rendered
        text fits ``room`` characters are (at least the last unit), as a context's recent
        block is fitted to its budget. Needs :attr:`runs`."""
        count = self.count
        kept, total, last = count, -1, count - 1
        while last >= start:
            first = self._first_of_unit(last)
            size = self._chars(first, last + 1)
            if total + size > room:
                break
            kept, total, last = first, total + size, first - 1
        if kept == count and count > start:
            return self._first_of_unit(count - 1)
        return kept
