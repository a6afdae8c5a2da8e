"""What a context shows *for a turn*, and the grounded and reachability metrics over it.

A :class:`ShownContext` is one context read taken apart, keyed by turn key (the replay's own
ids: a LoCoMo dia id such as ``D1:3``, or ``S<N>`` for a session-date line), so the same
questions can be scored against another conversation's context (the chance control):

* ``recent``: each message the recent block shows, with the text the block shows for it
  (:func:`split_recent`);
* ``memory``: each item the memory block shows (:func:`parse_memory_items`), with its text
  as shown, the turns it **cites** (the recall result's ``source_entry_ids``: an
  observation's own sources; for a reflection, the sources of its supporting observations)
  and the turns one recall of it **returns** (the recall result's ``sources``: the cited
  messages still on the branch, tool calls with their results);
* ``listed``: each memory id the block names in a note without showing its text (an item
  the budget left out, listed so it stays one recall away), with the turns its recall returns.

Definitions (all pure functions of a :class:`ShownContext`):

* **grounded answer in context** (:func:`grounded_answer`): the normalized gold answer occurs
  in the normalized text shown for one of the question's evidence turns: the recent block's
  rendering of that turn, or the text of a memory item that cites it. The same string
  elsewhere in the context does not count.
* **reachable** (:meth:`ShownContext.reachable`): a turn the recent block shows, or one that
  one recall of a memory id the memory block shows or lists returns, as an agent reading the
  block would reach it. A reflection's recall returns the sources of its supporting
  observations, so those are one recall away too; an observation the memory block neither
  shows nor lists does not make its sources reachable, and a message behind a paging cursor
  is not one recall away.
* **out of reach** (:func:`out_of_reach`): the turns neither shown nor one recall away.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from om_api.evaluation.scoring import contains, memory_refs, normalize, scorable_answer

_ITEM = re.compile(r"^- \[((?:om|reflection):[a-f0-9]{12})\] ?(.*)$")
CONTINUATION = "  "


@dataclass(frozen=True)
class Recalled:
    """What one recall of a memory id offers: the turns it cites and the turns it returns."""

    cites: frozenset[str]
    returns: frozenset[str]


@dataclass(frozen=True)
class MemoryItem:
    """One item of the memory block: its id, its text as shown, and what recall offers."""

    ref: str
    text: str
    cites: frozenset[str]
    returns: frozenset[str]


@dataclass(frozen=True)
class ShownContext:
    """One context read taken apart (see the module docstring); ``text`` is both blocks'
    normalized text, for the ungrounded metric."""

    recent: Mapping[str, str]
    memory: tuple[MemoryItem, ...]
    text: str
    listed: tuple[MemoryItem, ...] = ()

    def reachable(self) -> frozenset[str]:
        """Turns shown in the recent block or returned by one recall of a memory id the
        memory block shows or lists."""
        returned = (t for item in (*self.memory, *self.listed) for t in item.returns)
        return frozenset(self.recent).union(returned)

    def texts_for(self, turns: Iterable[str]) -> list[str]:
        """The texts shown for ``turns``: their recent renderings, then the text of every
        memory item citing one of them (each text once, in block order)."""
        wanted = set(turns)
        texts = [self.recent[t] for t in self.recent if t in wanted]
        texts += [item.text for item in self.memory if item.cites & wanted]
        return texts


def parse_memory_items(memory_text: str) -> list[tuple[str, str]]:
    """``(id, text)`` of each ``- [om:<id>] text`` / ``- [reflection:<id>] text`` line of a
    memory block, in order; continuation lines (indented by two spaces) join their item's
    text with a newline. Headings, blank lines and notes end an item."""
    items: list[tuple[str, list[str]]] = []
    open_item = False
    for line in memory_text.splitlines():
        match = _ITEM.match(line)
        if match:
            items.append((match.group(1), [match.group(2)]))
            open_item = True
        elif open_item and line.startswith(CONTINUATION):
            items[-1][1].append(line[len(CONTINUATION) :])
        else:
            open_item = False
    return [(ref, "\n".join(lines)) for ref, lines in items]


def split_recent(recent_text: str, rendered: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The text the recent block shows for each message.

    ``rendered`` lists the shown messages in block order, each with its expected rendering
    (``[role] text``); the block joins renderings with newlines. A message whose expected
    rendering starts where the previous one ended gets exactly that text; one the block
    altered (a clipped newest message, a redacted secret) gets everything up to where the
    next message's expected rendering starts (the rest of the block for the last one).
    """
    shown: dict[str, str] = {}
    cursor = 0
    for position, (key, expected) in enumerate(rendered):
        if recent_text.startswith(expected, cursor):
            end = cursor + len(expected)
        else:
            following = [e for _, e in rendered[position + 1 :]]
            found = recent_text.find("\n" + following[0], cursor) if following else -1
            end = found if found >= 0 else len(recent_text)
        shown[key] = recent_text[cursor:end]
        cursor = end + 1
    return shown


def shown_context(
    memory_text: str,
    recent_text: str,
    rendered: Sequence[tuple[str, str]],
    recalled: Mapping[str, Recalled],
) -> ShownContext:
    """Take one context read apart: ``rendered`` as for :func:`split_recent`, ``recalled``
    what recall offers for each memory id shown or listed (ids it lacks cite and return
    nothing)."""
    empty = Recalled(frozenset(), frozenset())
    memory = tuple(
        MemoryItem(ref, text, recalled.get(ref, empty).cites, recalled.get(ref, empty).returns)
        for ref, text in parse_memory_items(memory_text)
    )
    shown = {item.ref for item in memory}
    # Ids a note lists: no text is shown for them, so they cite nothing for grounding.
    listed = tuple(
        MemoryItem(ref, "", frozenset(), recalled.get(ref, empty).returns)
        for ref in memory_refs(memory_text)
        if ref not in shown
    )
    return ShownContext(
        recent=split_recent(recent_text, rendered),
        memory=memory,
        text=normalize(f"{memory_text}\n\n{recent_text}"),
        listed=listed,
    )


def grounded_answer(
    answer: str | None, evidence: Sequence[str], shown: ShownContext
) -> bool | None:
    """Grounded: whether the answer occurs in a text shown for one of ``evidence`` (see the
    module docstring); None when the answer is not string-matched or there is no evidence."""
    target = scorable_answer(answer)
    if target is None or not evidence:
        return None
    return any(contains(normalize(text), target) for text in shown.texts_for(evidence))


def ungrounded_answer(
    answer: str | None, evidence: Sequence[str], shown: ShownContext
) -> bool | None:
    """Ungrounded, on the grounded metric's questions: whether the answer occurs anywhere in
    the context; None exactly when :func:`grounded_answer` is None."""
    target = scorable_answer(answer)
    if target is None or not evidence:
        return None
    return contains(shown.text, target)


def reached(evidence: Iterable[str], shown: ShownContext) -> tuple[str, ...]:
    """The evidence turns that are reachable, in the order given."""
    reachable = shown.reachable()
    return tuple(t for t in evidence if t in reachable)


def out_of_reach(turns: Iterable[str], shown: ShownContext) -> tuple[str, ...]:
    """The turns neither shown in the recent block nor one recall away, in the order given."""
    reachable = shown.reachable()
    return tuple(t for t in turns if t not in reachable)
