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
from typing import Final, Literal

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
    parts = [f"{omitted} memories left out to fit"]
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
    first, whatever the budget) so the rendering fits ``max_bytes``; returns the omission and
    how many outline lines (from the end) must be cut as a last resort."""
    layout, note, victims, condensed = _start(items, heading_bytes, policy, page_from)
    for position, (kind, index) in enumerate(victims):
        if position >= condensed and layout.size() <= max_bytes:
            break
        _drop(layout, note, items, kind, index)
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


Victim = tuple[Literal["observation", "reflection"], int]


def _start(
    items: Candidates, heading_bytes: dict[str, int], policy: Policy, page_from: str | None
) -> tuple[Layout, _Note, list[Victim], int]:
    """The layout with every item kept, an empty note, the order items are left out in, and
    how many of the first of them are left out at any budget."""
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
    condensed = 0
    if policy == "reachable":
        # A covered observation stays one recall away through its reflection, which is its
        # condensed form: it never shows beside it.
        order = [i for i in by_relevance if note.available[i]]
        condensed = len(order)
        order += [i for i in by_relevance if not note.available[i]]
    else:
        order = by_relevance
    victims: list[Victim] = [("observation", i) for i in order]
    victims += [("reflection", i) for i in range(len(items.reflection_bytes))]
    return layout, note, victims, condensed


def _drop(layout: Layout, note: _Note, items: Candidates, kind: str, index: int) -> None:
    if kind == "observation":
        layout.drop_observation(items.observation_bytes[index], items.runs[index])
    else:
        layout.reflections.line_bytes -= items.reflection_bytes[index]
        layout.reflections.count -= 1
    layout.note_bytes = note.leave_out(kind, index)


@dataclass(frozen=True)
class DropPlan:
    """What :func:`fit` leaves out at every budget at once: the items in the order they go,
    the rendering's exact size after each number of them has gone, and the note's parts;
    then (``reachable``) the same for each number of listed ids unlisted, oldest first.

    Leaving items out never puts one back, so what :func:`fit` leaves out for a budget is
    always a prefix of ``victims``: the shortest whose size fits; and when none fits, it
    unlists a prefix of the ids listed with every item out. Built once in the time of one
    :func:`fit` leaving everything out; each budget then costs a binary search.
    """

    victims: tuple[Victim, ...]
    lowest: tuple[int, ...]
    """``lowest[k]``: the smallest size after at most ``k`` items left out (non-increasing)."""
    covered: tuple[int, ...]
    """``covered[k]``: how many of the first ``k`` victims a reflection covers."""
    listed: tuple[bool, ...]
    """Whether each victim is named by its recall ref in the note."""
    refs: tuple[str, ...]
    """Each victim's recall ref."""
    rank: dict[str, int]
    """Each ref's place in render order (reflections, then observations)."""
    unlist_order: tuple[str, ...] = ()
    """The refs listed with every item out, oldest first: the order they are unlisted in."""
    unlisted_lowest: tuple[int, ...] = ()
    """``unlisted_lowest[j - 1]``: the smallest size, without the note's paging cursor, after
    at least one and at most ``j`` refs unlisted (non-increasing)."""
    unlisted_covered: tuple[int, ...] = ()
    """``unlisted_covered[j - 1]``: items a reflection still covers after ``j`` unlisted."""
    unlisted_counts: tuple[int, ...] = ()
    """``unlisted_counts[j - 1]``: items out of reach of the note after ``j`` unlisted."""

    def omission(self, max_bytes: int, page_from: str | None) -> Omission | None:
        """What :func:`fit` leaves out for ``max_bytes`` (``page_from``: the entry the note
        names once ids are unlisted), or ``None`` when even unlisting every id does not fit
        (then :func:`fit` cuts the outline too)."""
        if self.lowest[-1] <= max_bytes:
            return self._items_out(_first_at_most(self.lowest, max_bytes))
        cursor = _bytes(PAGE_PART.format(cursor=page_from)) if page_from else 0
        if not self.unlisted_lowest or self.unlisted_lowest[-1] + cursor > max_bytes:
            return None
        unlisted = _first_at_most(self.unlisted_lowest, max_bytes - cursor)
        return Omission(
            observations={i for kind, i in self.victims if kind == "observation"},
            reflections={i for kind, i in self.victims if kind == "reflection"},
            covered=self.unlisted_covered[unlisted],
            listed=dict.fromkeys(self.unlist_order[unlisted + 1 :]),
            unlisted=self.unlisted_counts[unlisted],
        )

    def _items_out(self, count: int) -> Omission:
        omission = Omission(covered=self.covered[count])
        listed: list[str] = []
        for (kind, index), ref, named in zip(
            self.victims[:count], self.refs, self.listed, strict=False
        ):
            (omission.observations if kind == "observation" else omission.reflections).add(index)
            if named:
                listed.append(ref)
        listed.sort(key=self.rank.__getitem__)
        omission.listed = dict.fromkeys(listed)
        return omission


_NEVER: Final = 1 << 62
"""A size no budget admits: what :class:`DropPlan` records where leaving out fewer items
than the condensed ones is not allowed."""


def _first_at_most(lowest: Sequence[int], bound: int) -> int:
    """The first index of the non-increasing ``lowest`` whose value is at most ``bound``."""
    low, high = 0, len(lowest) - 1
    while low < high:
        middle = (low + high) // 2
        if lowest[middle] <= bound:
            high = middle
        else:
            low = middle + 1
    return low


def plan_drops(items: Candidates, heading_bytes: dict[str, int], policy: Policy) -> DropPlan:
    """The :class:`DropPlan` of ``items``: :func:`fit`'s loops run to the end, recording the
    size after each item left out and each id unlisted.

    The same byte account as :class:`Layout` and the note's size, kept in plain integers
    (ten thousand items in milliseconds, where the objects :func:`fit` stops early with cost
    a hundred times more a step)."""
    layout, note, victims, condensed = _start(items, heading_bytes, policy, None)
    account = _Account(layout, policy)
    # Fewer than ``condensed`` items out is no choice at all: those sizes never fit.
    lowest = [account.size() if not condensed else _NEVER]
    covered = [0]
    listed: list[bool] = []
    refs: list[str] = []
    available = note.available
    for kind, index in victims:
        if kind == "observation":
            ref = items.observation_refs[index]
            account.drop_observation(items.observation_bytes[index], items.runs[index])
            account.covered += 1 if available[index] else 0
            named = policy == "reachable" and not available[index]
        else:
            ref = items.reflection_refs[index]
            account.drop_reflection(items.reflection_bytes[index])
            named = policy == "reachable"
        if named:
            account.list(ref)
        out = len(lowest)
        lowest.append(_NEVER if out < condensed else min(lowest[-1], account.size()))
        covered.append(account.covered)
        listed.append(named)
        refs.append(ref)
    order = sorted(
        (ref for ref, named in zip(refs, listed, strict=True) if named), key=note.rank.__getitem__
    )
    unlisted_lowest: list[int] = []
    unlisted_covered: list[int] = []
    unlisted_counts: list[int] = []
    for ref in order:
        account.unlist(ref)
        reflection = note.ref_index.get(ref)
        if reflection is not None:
            # Observations left out under this reflection are now out of recall's reach too.
            for i in items.reflection_covers[reflection]:
                available[i] -= 1
                if not available[i]:
                    account.covered -= 1
                    account.unlisted += 1
        size = account.size()
        unlisted_lowest.append(min(unlisted_lowest[-1], size) if unlisted_lowest else size)
        unlisted_covered.append(account.covered)
        unlisted_counts.append(account.unlisted)
    return DropPlan(
        victims=tuple(victims),
        lowest=tuple(lowest),
        covered=tuple(covered),
        listed=tuple(listed),
        refs=tuple(refs),
        rank=note.rank,
        unlist_order=tuple(order),
        unlisted_lowest=tuple(unlisted_lowest),
        unlisted_covered=tuple(unlisted_covered),
        unlisted_counts=tuple(unlisted_counts),
    )


class _Account:
    """:meth:`Layout.size` and the note's size (``_Note.size``) in plain integers."""

    def __init__(self, layout: Layout, policy: Policy) -> None:
        self.policy = policy
        self.fixed = layout.memory_heading_bytes
        self.fixed += 2 + layout.outline.size() if layout.outline.count else 0
        self.note_fixed, self.covered_part, self.unlisted_part = _note_parts(policy)
        self.listed_part = 2 + len(LISTED_PART)
        self.reflection_heading = 2 + layout.reflections.heading_bytes
        self.reflection_lines = layout.reflections.line_bytes
        self.reflection_count = layout.reflections.count
        self.observation_heading = 2 + layout.observations.heading_bytes
        self.observation_lines = layout.observations.line_bytes
        self.observation_count = layout.observations.count
        self.prefix_bytes = layout.prefix_bytes
        self.run_prefix_bytes = layout.run_prefix_bytes
        self.run_kept = list(layout.run_kept)
        self.count = 0
        self.covered = 0
        self.unlisted = 0
        self.listed = 0
        self.listed_bytes = 0

    def drop_observation(self, line_bytes: int, run: int) -> None:
        self.observation_lines -= line_bytes
        self.observation_count -= 1
        self.run_kept[run] -= 1
        if not self.run_kept[run]:
            self.prefix_bytes -= self.run_prefix_bytes[run]
        self.count += 1

    def drop_reflection(self, line_bytes: int) -> None:
        self.reflection_lines -= line_bytes
        self.reflection_count -= 1
        self.count += 1

    def list(self, ref: str) -> None:
        self.listed += 1
        self.listed_bytes += _bytes(f"[{ref}]")

    def unlist(self, ref: str) -> None:
        self.listed -= 1
        self.listed_bytes -= _bytes(f"[{ref}]")
        self.unlisted += 1

    def size(self) -> int:
        total = self.fixed
        if self.reflection_count:
            total += self.reflection_heading + self.reflection_lines + self.reflection_count
        if self.observation_count:
            total += self.observation_heading + self.observation_lines + self.observation_count
            total += self.prefix_bytes
        if self.count:
            # The note's fixed text, its numbers' digits, and the listed refs joined by spaces.
            total += self.note_fixed + len(str(self.count))
            if self.policy == "count":
                return total
            if self.covered:
                total += self.covered_part + len(str(self.covered))
            if self.unlisted:
                total += self.unlisted_part + len(str(self.unlisted))
            if self.listed:
                total += self.listed_part + self.listed_bytes + self.listed - 1
        return total


def _note_parts(policy: Policy) -> tuple[int, int, int]:
    """Bytes of the note's fixed text (with the blank line before it, without the count's
    digits), and of the covered and unlisted parts without their digits: measured on the
    note functions themselves, so the account cannot drift from the note they write."""
    if policy == "count":
        return 2 + _bytes(count_note(1)) - 1, 0, 0
    base = _bytes(reachable_note(1, 0, (), 0, None))
    covered = _bytes(reachable_note(1, 1, (), 0, None)) - base - 1
    unlisted = _bytes(reachable_note(1, 0, (), 1, None)) - base - 1
    return 2 + base - 1, covered, unlisted


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
