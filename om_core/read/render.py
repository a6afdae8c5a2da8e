"""Rendering prepared memory: reflections, then observations, within the 256 KiB cap.

Observations are shown oldest first by the time of their sources, each with its date, so a
model reading the context can tell what was true when, and which of two facts is the newer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from om_core.ledger.ids import OBSERVATION_REF_PREFIX, REFLECTION_REF_PREFIX
from om_core.ledger.models import Frozen, Observation, Reflection
from om_core.ledger.relative_dates import MONTHS
from om_core.policy.limits import MAX_RENDERED_MEMORY_BYTES
from om_core.policy.redaction import normalize_secrets, redact
from om_core.read.memory_fit import (
    Candidates,
    DropPlan,
    Omission,
    Policy,
    count_note,
    fit,
    plan_drops,
    reachable_note,
)

MEMORY_HEADING = "# Observational memory"
OUTLINE_HEADING = "## Scope Outline"
REFLECTIONS_HEADING = "## Reflections"
OBSERVATIONS_HEADING = "## Observations"


def render_observational_memory(
    reflections: Sequence[Reflection],
    observations: Sequence[Observation],
    outline: Sequence[str] | None = None,
    secrets: Iterable[str] = (),
    *,
    max_bytes: int = MAX_RENDERED_MEMORY_BYTES,
) -> str:
    """Render memory as markdown: optional scope outline, reflections, then observations.

    Each item shows its recall id (``reflection:<id>`` / ``om:<id>``). Observations are in
    time order (:func:`in_time_order`), dated when their ``observedAt`` is known
    (``- [om:<id>] (8 May 2023, 13:56 UTC) text``); a line of the same time as the line above
    it does not repeat the date. Known secrets are redacted. The result never exceeds
    ``max_bytes`` (UTF-8, at most 256 KiB): lowest-relevance observations go first, then the
    oldest reflections, and a final line says how many were left out. Returns ``""`` when
    there is nothing to render.
    """
    return _render(reflections, observations, outline, secrets, max_bytes, "count", None).text


class RenderedMemory(Frozen):
    """A memory block condensed and fitted to a budget, and what it left out
    (:func:`render_reachable_memory`).

    ``omitted_ids`` are the bare ids of the observations and reflections left out;
    ``covered`` of them are observations a reflection shown or listed covers, ``listed`` are
    named by recall id in the note, ``unlisted`` are behind the note's paging cursor only.
    """

    text: str
    omitted_ids: tuple[str, ...] = ()
    covered: int = 0
    listed: int = 0
    unlisted: int = 0


def render_reachable_memory(
    reflections: Sequence[Reflection],
    observations: Sequence[Observation],
    outline: Sequence[str] | None = None,
    secrets: Iterable[str] = (),
    *,
    max_bytes: int = MAX_RENDERED_MEMORY_BYTES,
    page_from: str | None = None,
) -> RenderedMemory:
    """Render memory as :func:`render_observational_memory` does, condensed and leaving
    nothing out of reach.

    Observations a reflection covers are left out at any budget: the reflection is their
    condensed form, and recalling it returns their messages. What else does not fit
    ``max_bytes`` is left out in this order: observations lowest-relevance first, then the
    oldest reflections; the final note counts the covered ones and lists every other item
    left out by its recall id (``[om:<id>]``, ``[reflection:<id>]``), so each stays one
    recall away. Only when those ids do not fit either are the oldest of them left
    unlisted, and the note says to page messages backward from entry ``page_from`` (the
    oldest message the context shows). Never exceeds ``max_bytes`` but for the heading and
    that note when ``max_bytes`` cannot hold even them.
    """
    return _render(reflections, observations, outline, secrets, max_bytes, "reachable", page_from)


def _render(
    reflections: Sequence[Reflection],
    observations: Sequence[Observation],
    outline: Sequence[str] | None,
    secrets: Iterable[str],
    max_bytes: int,
    policy: Policy,
    page_from: str | None,
) -> RenderedMemory:
    return MemoryPlan(reflections, observations, outline, secrets, policy).fitted(
        max_bytes, page_from
    )


class MemoryPlan:
    """Memory rendered line by line once, then fitted to any number of budgets.

    The lines (redacted, dated, in time order) and their byte sizes are prepared up front;
    :meth:`fitted` answers as :func:`render_reachable_memory` (``reachable`` policy) or
    :func:`render_observational_memory` (``count``) would for the same items. From the
    first budget on it answers from a :class:`~om_core.read.memory_fit.DropPlan` (built in
    plain integer steps; then one binary search and the joining of the kept lines), so a
    context rendered again beside a longer window of messages does not fit ten thousand
    observations again. ``prepared`` lines (:class:`ObservationLines` of a superset of
    ``observations``, for the same secrets) are looked up instead of rendered again. Immutable
    once built; the drop plan is computed on first need (concurrent first uses compute equal
    ones). Raises ``ValueError`` for lines prepared with other secrets.
    """

    def __init__(
        self,
        reflections: Sequence[Reflection],
        observations: Sequence[Observation],
        outline: Sequence[str] | None,
        secrets: Iterable[str],
        policy: Policy,
        prepared: ObservationLines | None = None,
    ) -> None:
        keys = normalize_secrets(secrets)
        lines = ObservationLines(observations, keys) if prepared is None else prepared
        # As sets: normalizing again may order secrets of equal length otherwise.
        if set(lines.secrets) != set(keys):
            raise ValueError("the prepared lines were redacted for other secrets")
        self._policy: Policy = policy
        self._outline = [redact(line, keys) for line in outline or ()]
        self._observations = lines.in_time_order(observations)
        self._reflections = tuple(reflections)
        self._ref_lines = [_item(REFLECTION_REF_PREFIX, r.id, r.text, keys) for r in reflections]
        self._obs_lines = [lines.line(o) for o in self._observations]
        self._runs, self._prefixes = _date_runs([lines.when(o) for o in self._observations])
        position = {o.id: i for i, o in enumerate(self._observations)}
        self._items = Candidates(
            outline_bytes=[_bytes(line) for line in self._outline],
            reflection_bytes=[_bytes(line) for line in self._ref_lines],
            reflection_refs=[REFLECTION_REF_PREFIX + r.id for r in reflections],
            reflection_covers=[
                [position[i] for i in r.observation_ids if i in position] for r in reflections
            ],
            observation_bytes=[_bytes(line) for line in self._obs_lines],
            observation_refs=[OBSERVATION_REF_PREFIX + o.id for o in self._observations],
            relevance=[o.relevance for o in self._observations],
            runs=self._runs,
            run_prefix_bytes=[_bytes(p) for p in self._prefixes],
        )
        self._drops: DropPlan | None = None
        self._whole: RenderedMemory | None = None

    def fitted(self, max_bytes: int, page_from: str | None = None) -> RenderedMemory:
        """The memory block within ``max_bytes`` (UTF-8, at most 256 KiB), as the render
        functions describe; ``page_from`` is the entry the note names for unlisted ids."""
        max_bytes = min(max_bytes, MAX_RENDERED_MEMORY_BYTES)
        if not (self._outline or self._reflections or self._observations):
            return RenderedMemory(text="")
        if self._drops is None:
            self._drops = plan_drops(self._items, _HEADING_BYTES, self._policy)
        omission = self._drops.omission(max_bytes, page_from)
        cut = 0
        if omission is None:
            omission, cut = fit(self._items, _HEADING_BYTES, max_bytes, self._policy, page_from)
        if cut or omission.count or omission.covered or omission.listed or omission.unlisted:
            return self._assemble(omission, cut, page_from)
        # Everything shown: the same text whatever the budget and page, read after read (a
        # context fits memory twice per read), so assembled once.
        if self._whole is None:
            self._whole = self._assemble(omission, cut, page_from)
        return self._whole

    def searched(self, max_bytes: int, page_from: str | None = None) -> RenderedMemory:
        """:meth:`fitted` by :func:`~om_core.read.memory_fit.fit`'s own search, leaving items
        out one at a time until the rest fits: the reference the drop plan must equal."""
        max_bytes = min(max_bytes, MAX_RENDERED_MEMORY_BYTES)
        if not (self._outline or self._reflections or self._observations):
            return RenderedMemory(text="")
        omission, cut = fit(self._items, _HEADING_BYTES, max_bytes, self._policy, page_from)
        return self._assemble(omission, cut, page_from)

    def _assemble(self, omission: Omission, cut: int, page_from: str | None) -> RenderedMemory:
        sections = [MEMORY_HEADING]
        outline = self._outline[: len(self._outline) - cut]
        if outline:
            sections += ["", OUTLINE_HEADING, *outline]
        kept_refs = [
            line for i, line in enumerate(self._ref_lines) if i not in omission.reflections
        ]
        if kept_refs:
            sections += ["", REFLECTIONS_HEADING, *kept_refs]
        kept_obs: list[str] = []
        dated_run = -1
        runs, prefixes = self._runs, self._prefixes
        for i, line in enumerate(self._obs_lines):
            if i in omission.observations:
                continue
            if runs[i] != dated_run:
                dated_run = runs[i]
                line = _dated(line, prefixes[runs[i]])
            kept_obs.append(line)
        if kept_obs:
            sections += ["", OBSERVATIONS_HEADING, *kept_obs]
        if omission.count:
            sections += ["", self._note(omission, page_from)]
        omitted = [self._observations[i].id for i in sorted(omission.observations)]
        omitted += [self._reflections[i].id for i in sorted(omission.reflections)]
        return RenderedMemory(
            text="\n".join(sections),
            omitted_ids=tuple(omitted),
            covered=omission.covered,
            listed=len(omission.listed),
            unlisted=omission.unlisted,
        )

    def _note(self, omission: Omission, page_from: str | None) -> str:
        if self._policy == "count":
            return count_note(omission.count)
        return reachable_note(
            omission.count, omission.covered, list(omission.listed), omission.unlisted, page_from
        )


class ObservationLines:
    """Observations rendered once as list lines (redacted, undated), with the time each
    shows and sorts by: what every :class:`MemoryPlan` over some of them can share. Lines
    are found by observation id; an observation not among them is rendered on the spot."""

    def __init__(
        self,
        observations: Iterable[Observation],
        secrets: tuple[str, ...],
        earlier: ObservationLines | None = None,
    ) -> None:
        self.secrets = secrets
        # An observation's line and times are a function of its id, text, time and the
        # secrets: those of ``earlier`` (a previous version of the same memory) that match
        # are taken as they are, so a memory grown by a few records renders only those.
        same = earlier is not None and set(earlier.secrets) == set(secrets)
        reused = earlier._known if earlier is not None and same else {}
        self._known: dict[str, tuple[Observation, str, str | None, datetime]] = {}
        for o in observations:
            known = reused.get(o.id)
            if known is None or (known[0].text, known[0].observed_at) != (o.text, o.observed_at):
                self._known[o.id] = self._rendered(o)
            else:
                self._known[o.id] = (o, *known[1:])
        self.chars = sum(len(known[1]) for known in self._known.values())
        """Characters of the rendered lines."""

    def _rendered(self, o: Observation) -> tuple[Observation, str, str | None, datetime]:
        line = _item(OBSERVATION_REF_PREFIX, o.id, o.text, self.secrets)
        return o, line, format_time(o.observed_at), _moment(o.observed_at) or _UNDATED

    def _entry(self, o: Observation) -> tuple[Observation, str, str | None, datetime]:
        known = self._known.get(o.id)
        if known is not None and known[0] is o:
            return known
        return self._rendered(o)

    def in_time_order(self, observations: Sequence[Observation]) -> list[Observation]:
        """:func:`in_time_order` from the times already read."""
        return sorted(observations, key=lambda o: self._entry(o)[3])

    def line(self, o: Observation) -> str:
        """``- [om:<id>] text``, redacted."""
        return self._entry(o)[1]

    def when(self, o: Observation) -> str | None:
        """The time the observation shows (:func:`format_time`)."""
        return self._entry(o)[2]


def _date_runs(times: Sequence[str | None]) -> tuple[list[int], list[str]]:
    """Each observation's date run (consecutive observations of the same shown time) and
    each run's ``(date) `` prefix (empty for undated observations)."""
    runs: list[int] = []
    prefixes: list[str] = []
    last: object = object()
    for when in times:
        if when != last or not prefixes:
            prefixes.append(f"({when}) " if when else "")
            last = when
        runs.append(len(prefixes) - 1)
    return runs, prefixes


def _dated(line: str, prefix: str) -> str:
    """``- [om:<id>] text`` with ``prefix`` after the id."""
    head, _, body = line.partition("] ")
    return f"{head}] {prefix}{body}"


MEMORY_REF_PATTERN = re.compile(r"\[(om|reflection):([a-f0-9]{12})\]")
"""A recall id as a memory block writes it, in an item or in a note: ``[om:<id>]``."""


def memory_refs(memory_text: str) -> list[str]:
    """Every memory id (``om:<id>``, ``reflection:<id>``) a memory block shows as an item or
    lists in its note, each once, in order: what an agent reading the block can recall."""
    found = MEMORY_REF_PATTERN.findall(memory_text)
    return list(dict.fromkeys(f"{kind}:{memory_id}" for kind, memory_id in found))


def in_time_order(observations: Sequence[Observation]) -> list[Observation]:
    """``observations`` sorted by ``observedAt``, oldest first; stable, so those of the same
    time keep their record order. Undated ones (recorded before sources carried times, or
    with an unreadable time) come first, in record order: they are the older memory."""
    return sorted(observations, key=lambda o: _moment(o.observed_at) or _UNDATED)


def format_time(value: str | None) -> str | None:
    """A timestamp as a reader wants it: ``8 May 2023``, plus ``, 13:56`` when the time of
    day is not midnight and its zone (``UTC``, ``+02:00``) when known; ``None`` if unreadable."""
    moment = _parse(value)
    if moment is None:
        return None
    text = f"{moment.day} {MONTHS[moment.month - 1]} {moment.year}"
    if (moment.hour, moment.minute, moment.second) != (0, 0, 0):
        text += f", {moment:%H:%M}"
        offset = moment.utcoffset()
        if offset is not None:
            text += " UTC" if not offset else " " + moment.isoformat(timespec="minutes")[-6:]
    return text


_UNDATED = datetime.min.replace(tzinfo=UTC)


def _parse(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _moment(value: str | None) -> datetime | None:
    """An instant comparable with any other (a naive time is taken as UTC)."""
    moment = _parse(value)
    if moment is None:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _item(prefix: str, memory_id: str, text: str, secrets: tuple[str, ...]) -> str:
    # Continuation lines are indented so a multi-line text stays one list item.
    body = redact(text, secrets).replace("\n", "\n  ")
    return f"- [{prefix}{memory_id}] {body}"


def _bytes(line: str) -> int:
    return len(line.encode("utf-8"))


_HEADING_BYTES = {
    "memory": _bytes(MEMORY_HEADING),
    "outline": _bytes(OUTLINE_HEADING),
    "reflections": _bytes(REFLECTIONS_HEADING),
    "observations": _bytes(OBSERVATIONS_HEADING),
}
