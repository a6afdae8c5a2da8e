"""Fitting rendered memory into a byte budget: which items are left out, and the note that
stands in for them.

Two policies share one exact byte account (:class:`Layout`, O(1) per item left out):

* ``count`` (``render_observational_memory``'s own): lowest-relevance observations go
  first, then the oldest reflections, and the note only counts them.
* ``reachable`` (the service's context): observations a reflection covers are left out
  whatever the budget (the reflection is their condensed form, read instead of them, and one
  recall of it still returns their messages: showing both would pay twice for the same
  memory, and memory would grow with every observation ever made), then the rest in the
  ``count`` order until the rendering fits; the note lists every other item left out by its
  recall id, so nothing rendered falls out of reach. Only when even those ids do not fit are
  the oldest of them left unlisted, and the note names the entry to page messages backward
  from instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Policy = Literal["count", "reachable"]


def count_note(count: int) -> str:
    """The ``count`` note: how many items were left out."""
    return f"({count} memories omitted to fit the size cap; recall them by id)"


COVERED_PART = "{covered} of them under a reflection shown or listed here (its recall returns them)"
LISTED_PART = "recall these by id: "
UNLISTED_PART = "{count} older ones not listed"
PAGE_PART = ": page messages backward from entry {cursor}"


def reachable_note(
    omitted: int, covered: int, listed: Sequence[str], unlisted: int, page_from: str | None
) -> str:
    """The service's note: how many items were left out, how many a reflection covers, the
    recall ids of the others, and (when even their ids did not fit) the entry to page back
    from for the oldest."""
    parts = [f"{omitted} memories left out"]
    if covered:
        parts.append(COVERED_PART.format(covered=covered))
    if listed:
        parts.append(LISTED_PART + " ".join(f"[{ref}]" for ref in listed))
    if unlisted:
        tail = PAGE_PART.format(cursor=page_from) if page_from else ""
        parts.append(UNLISTED_PART.format(count=unlisted) + tail)
    return "(" + "; ".join(parts) + ")"


def _bytes(text: str) -> int:
    return len(text.encode("utf-8"))


@dataclass
class SectionSize:
    """A run of lines under one heading: their total bytes and count (kept lines only)."""

    heading_bytes: int
    line_bytes: int = 0
    count: int = 0

    def size(self) -> int:
        """Heading and lines joined by newlines; 0 when no line is kept."""
        return self.heading_bytes + self.line_bytes + self.count if self.count else 0


@dataclass
class Layout:
    """Exact byte size of the rendering for the items still kept, updated per removal.

    Observation lines are counted without their date; each date run (consecutive
    observations of the same time) adds its ``(date) `` prefix once while any of its lines
    is kept, since only the first kept line of a run carries it.
    """

    memory_heading_bytes: int
    outline: SectionSize
    reflections: SectionSize
    observations: SectionSize
    run_prefix_bytes: list[int]
    run_kept: list[int]
    prefix_bytes: int = 0
    note_bytes: int = 0

    def size(self) -> int:
        # Each section is a blank line, then its heading and lines; all joined by newlines.
        total = self.memory_heading_bytes
        for section in (self.outline, self.reflections, self.observations):
            if section.count:
                total += 2 + section.size()
        if self.observations.count:
            total += self.prefix_bytes
        if self.note_bytes:
            total += 2 + self.note_bytes
        return total

    def drop_observation(self, line_bytes: int, run: int) -> None:
        self.observations.line_bytes -= line_bytes
        self.observations.count -= 1
        self.run_kept[run] -= 1
        if not self.run_kept[run]:
            self.prefix_bytes -= self.run_prefix_bytes[run]


@dataclass
class Omission:
    """What was left out: item positions, and (``reachable``) the note's parts."""

    observations: set[int] = field(default_factory=set)
    reflections: set[int] = field(default_factory=set)
    covered: int = 0
    listed: dict[str, None] = field(default_factory=dict)
    unlisted: int = 0

    @property
    def count(self) -> int:
        return len(self.observations) + len(self.reflections)


@dataclass(frozen=True)
class Candidates:
    """The items to fit: rendered line bytes, observation relevance and date runs, which
    observations each reflection covers (positions), and every item's recall ref."""

    outline_bytes: Sequence[int]
    reflection_bytes: Sequence[int]
    reflection_refs: Sequence[str]
    reflection_covers: Sequence[Sequence[int]]
    observation_bytes: Sequence[int]
    observation_refs: Sequence[str]
    relevance: Sequence[float]
    runs: Sequence[int]
    run_prefix_bytes: Sequence[int]


def fit(
    items: Candidates,
    heading_bytes: dict[str, int],
    max_bytes: int,
    policy: Policy,
    page_from: str | None = None,
) -> tuple[Omission, int]:
    """Choose what to leave out (under ``reachable``, every observation a reflection covers
    first) so the rendering fits ``max_bytes``; returns the omission and how many outline
    lines (from the end) must be cut as a last resort."""
    run_kept = [0] * len(items.run_prefix_bytes)
    for run in items.runs:
        run_kept[run] += 1
    layout = Layout(
        memory_heading_bytes=heading_bytes["memory"],
        outline=SectionSize(
            heading_bytes["outline"], sum(items.outline_bytes), len(items.outline_bytes)
        ),
        reflections=SectionSize(
            heading_bytes["reflections"], sum(items.reflection_bytes), len(items.reflection_bytes)
        ),
        observations=SectionSize(
            heading_bytes["observations"],
            sum(items.observation_bytes),
            len(items.observation_bytes),
        ),
        run_prefix_bytes=list(items.run_prefix_bytes),
        run_kept=run_kept,
        prefix_bytes=sum(
            b for b, kept in zip(items.run_prefix_bytes, run_kept, strict=True) if kept
        ),
    )
    note = _Note(items, policy, page_from)
    by_relevance = sorted(
        range(len(items.observation_bytes)), key=lambda i: (items.relevance[i], i)
    )
    condensed: list[int] = []
    if policy == "reachable":
        # A covered observation stays one recall away through its reflection: it never shows.
        condensed = [i for i in by_relevance if note.available[i]]
        order = [i for i in by_relevance if not note.available[i]]
    else:
        order = by_relevance
    victims = [("observation", i) for i in order]
    victims += [("reflection", i) for i in range(len(items.reflection_bytes))]
    for index in condensed:
        layout.drop_observation(items.observation_bytes[index], items.runs[index])
        layout.note_bytes = note.leave_out("observation", index)
    for kind, index in victims:
        if layout.size() <= max_bytes:
            break
        if kind == "observation":
            layout.drop_observation(items.observation_bytes[index], items.runs[index])
        else:
            layout.reflections.line_bytes -= items.reflection_bytes[index]
            layout.reflections.count -= 1
        layout.note_bytes = note.leave_out(kind, index)
    # Still too large with every item gone: the ids themselves did not fit. The oldest go
    # unlisted, behind the paging cursor.
    if policy == "reachable":
        for ref in note.listed_in_order():
            if layout.size() <= max_bytes:
                break
            layout.note_bytes = note.unlist(ref)
    note.omission.listed = dict.fromkeys(note.listed_in_order())
    cut = 0
    while cut < len(items.outline_bytes) and layout.size() > max_bytes:
        cut += 1
        layout.outline.line_bytes -= items.outline_bytes[-cut]
        layout.outline.count -= 1
    return note.omission, cut


class _Note:
    """The note's counts and its exact size, kept in step with each item left out."""

    def __init__(self, items: Candidates, policy: Policy, page_from: str | None) -> None:
        self.items = items
        self.policy = policy
        self.page_from = page_from
        self.omission = Omission()
        self.listed_bytes = 0
        # How many reflections (kept or listed) cover each observation.
        self.available = [0] * len(items.observation_bytes)
        for covered in items.reflection_covers:
            for i in covered:
                self.available[i] += 1
        self.ref_index = {ref: i for i, ref in enumerate(items.reflection_refs)}
        # Render order: reflections, then observations (oldest first in both).
        first = len(items.reflection_refs)
        self.rank = {ref: i for i, ref in enumerate(items.reflection_refs)}
        self.rank |= {ref: first + i for i, ref in enumerate(items.observation_refs)}

    def listed_in_order(self) -> list[str]:
        """The listed refs in render order, the oldest first."""
        return sorted(self.omission.listed, key=self.rank.__getitem__)

    def size(self) -> int:
        o = self.omission
        if not o.count:
            return 0
        if self.policy == "count":
            return _bytes(count_note(o.count))
        base = _bytes(reachable_note(o.count, o.covered, (), o.unlisted, self.page_from))
        if o.listed:
            base += 2 + len(LISTED_PART) + self.listed_bytes + len(o.listed) - 1
        return base

    def leave_out(self, kind: str, index: int) -> int:
        o = self.omission
        if kind == "observation":
            o.observations.add(index)
            if self.available[index]:
                o.covered += 1
            else:
                self._list(self.items.observation_refs[index])
        else:
            o.reflections.add(index)
            self._list(self.items.reflection_refs[index])
        return self.size()

    def unlist(self, ref: str) -> int:
        o = self.omission
        del o.listed[ref]
        self.listed_bytes -= _bytes(f"[{ref}]")
        o.unlisted += 1
        index = self.ref_index.get(ref)
        if index is not None:
            # Observations left out under this reflection are now out of recall's reach too.
            for i in self.items.reflection_covers[index]:
                self.available[i] -= 1
                if not self.available[i] and i in o.observations:
                    o.covered -= 1
                    o.unlisted += 1
        return self.size()

    def _list(self, ref: str) -> None:
        if self.policy == "reachable":
            self.omission.listed[ref] = None
            self.listed_bytes += _bytes(f"[{ref}]")
