"""The messages of a branch tail, walked once for a context build.

A context build asks a few questions of the tail it is given: which messages memory does not
cover yet (after the observation cursor), which form the recent window (those, or at least the
last ``context.recentMessages``, never splitting a tool call from its results), how large the
window renders, and which of its oldest units (a call with its results) to leave out to fit a
budget. Asked of the entries themselves, each question walked the tail again, read after read.
:class:`TailMessages` walks it once and answers each from prefix sums; given the walk of the
branch's previous tail (a tail is mostly the previous one plus the turn's messages), it walks
only the entries appended since.

It answers only for a tail whose tool units are *runs*: every result comes right after its
call (the latest of its id) or after another result of the same call, and no tool message
makes calls. Agent runs have that shape. For any other tail ``runs`` is ``False``, and the
caller selects from the entries (:func:`~om_core.read.window.select_recent_message_entries`,
:func:`~om_core.read.window.tool_units`), whose answers these equal wherever both apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from itertools import pairwise
from operator import is_

from om_core.ledger.models import SessionEntry
from om_core.policy.redaction import normalize_secrets, redact

EXTEND_SCAN = 64
"""Entries looked through, from the newest, for the last one an earlier walk ended on."""


@dataclass(frozen=True)
class TailMessages:
    """The user/assistant/tool messages of a tail, in branch order, with prefix sums.

    ``ids`` and ``lines`` are the messages' ids and texts as a recent block shows them
    (``keys``, the secrets, redacted). ``sizes[i]`` counts the rendered characters of the
    messages before the ``i``-th plus one newline each, ``tokens[i]`` their estimated tokens,
    from any origin (only differences are read). ``back[i]`` is how far before message ``i``
    its call is (0: none, or not in the tail when it points past the first message).
    ``runs``: the tail's units are runs (see the module). Immutable: :meth:`of` builds a new
    one, sharing nothing it will change.
    """

    entries: tuple[SessionEntry, ...]
    keys: tuple[str, ...]
    ordinals: list[int]  # messages before each entry (and after the last), from the origin
    messages: list[SessionEntry]
    ids: list[str]
    lines: list[str]
    sizes: list[int]
    tokens: list[int]
    back: list[int]
    calls: dict[str, int]  # a call id -> the ordinal of the message that makes it
    cursor: str | None
    cursor_at: int | None  # where ``cursor`` is among ``entries``
    runs: bool

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
        same branch, is continued instead when ``entries`` go on from it (its entry objects,
        then new ones): only those are walked."""
        keys = normalize_secrets(secrets)
        if earlier is not None and (earlier.cursor, earlier.keys) == (cursor, keys):
            continued = earlier._continued(entries)
            if continued is not None:
                return continued
        empty = cls((), keys, [0], [], [], [], [0], [0], [], {}, cursor, None, True)
        return empty._appended(entries)

    def _continued(self, entries: Sequence[SessionEntry]) -> TailMessages | None:
        """This walk moved to ``entries``, if they hold its newest entry object and, before it,
        the same objects as this walk's (a tail cut from the front is fine); else ``None``."""
        if not self.entries or self.ordinals[0] > len(self.messages):
            return None  # nothing to go on from, or calls of messages long gone piled up
        newest = self.entries[-1]
        found = next(
            (
                j
                for j in range(len(entries) - 1, len(entries) - 1 - EXTEND_SCAN, -1)
                if j >= 0 and entries[j] is newest
            ),
            None,
        )
        cut = len(self.entries) - 1 - found if found is not None else -1
        if found is None or cut < 0 or not all(map(is_, self.entries[cut:], entries[: found + 1])):
            return None
        return self._cut(cut)._appended(entries[found + 1 :])

    def _cut(self, count: int) -> TailMessages:
        """This walk without its first ``count`` entries."""
        if count == 0:
            return self
        dropped = self.ordinals[count] - self.ordinals[0]
        at = self.cursor_at
        return replace(
            self,
            entries=self.entries[count:],
            ordinals=self.ordinals[count:],
            messages=self.messages[dropped:],
            ids=self.ids[dropped:],
            lines=self.lines[dropped:],
            sizes=self.sizes[dropped:],
            tokens=self.tokens[dropped:],
            back=self.back[dropped:],
            cursor_at=at - count if at is not None and at >= count else None,
        )

    def _appended(self, entries: Sequence[SessionEntry]) -> TailMessages:
        """This walk gone on over ``entries`` (a new walk: nothing of this one changes)."""
        if not entries:
            return self
        messages, sizes, tokens = list(self.messages), list(self.sizes), list(self.tokens)
        back, ordinals, calls = list(self.back), list(self.ordinals), dict(self.calls)
        ids, lines, keys = list(self.ids), list(self.lines), self.keys
        cursor, cursor_at, runs = self.cursor, self.cursor_at, self.runs
        origin = ordinals[0]
        redacted = partial(redact, secrets=keys)
        for index, entry in enumerate(entries, start=len(self.entries)):
            message = entry.message
            if message is not None and entry.is_eligible_observation_source:
                at = origin + len(messages)
                call = calls.get(message.tool_call_id or "") if message.role == "tool" else None
                if call is not None and call >= origin and call not in (at - 1, at - 1 - back[-1]):
                    runs = False  # a result apart from its call's run (cut off, it is alone)
                for tool_call in message.tool_calls:
                    runs = runs and message.role != "tool"
                    calls[tool_call.id] = at
                back.append(0 if call is None else at - call)
                messages.append(entry)
                ids.append(entry.id)
                lines.append(message.rendered_as(keys, redacted) if keys else message.rendered)
                sizes.append(sizes[-1] + len(message.rendered) + 1)
                tokens.append(tokens[-1] + message.estimated_tokens)
            ordinals.append(origin + len(messages))
            if entry.id == cursor:
                cursor_at = index  # the last occurrence wins, as a search from the end
        return TailMessages(
            self.entries + tuple(entries), keys,
            ordinals, messages, ids, lines, sizes, tokens, back, calls, cursor, cursor_at, runs,
        )  # fmt: skip

    @property
    def observed(self) -> int:
        """Messages up to the observation cursor (all of the tail's are after it when it is
        ``None`` or not in the tail)."""
        if self.cursor_at is None:
            return 0
        return self.ordinals[self.cursor_at + 1] - self.ordinals[0]

    def _first_of_unit(self, index: int) -> int:
        back = self.back[index]
        return index - back if back <= index else index  # a call cut off: a unit of its own

    @property
    def unobserved(self) -> int:
        """Messages after the observation cursor."""
        return len(self.messages) - self.observed

    def window_start(self, keep: int, max_tokens: int | None = None) -> int:
        """Where the recent window begins: the index of its first message, as
        :func:`~om_core.read.window.select_recent_message_entries` (``keep``, ``max_tokens``)
        selects it (``len(messages)`` for an empty window). Needs :attr:`runs`."""
        count = len(self.messages)
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
        total = self.tokens[count] - self.tokens[start]
        for first, following in pairwise(firsts):
            if total <= max_tokens:
                return first
            total -= self.tokens[following] - self.tokens[first]
        return firsts[-1] if firsts else start

    def rendered_size(self, start: int) -> int:
        """Characters of the messages from ``start`` on as rendered, one newline between each."""
        return self.sizes[-1] - self.sizes[start] - 1

    def newest_fitting(self, start: int, room: int) -> int:
        """The first message kept when only the newest units from ``start`` on whose rendered
        text fits ``room`` characters are (at least the last unit), as
        a context's recent block is fitted to its budget. Needs :attr:`runs`."""
        count = len(self.messages)
        kept, total, last = count, -1, count - 1
        while last >= start:
            first = self._first_of_unit(last)
            size = self.sizes[last + 1] - self.sizes[first]
            if total + size > room:
                break
            kept, total, last = first, total + size, first - 1
        if kept == count and count > start:
            return self._first_of_unit(count - 1)
        return kept
