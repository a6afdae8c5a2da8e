"""Rendering prepared memory: reflections, then observations, within the 256 KiB cap.

Observations are shown oldest first by the time of their sources, each with its date, so a
model reading the context can tell what was true when, and which of two facts is the newer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from om_core.ids import OBSERVATION_REF_PREFIX, REFLECTION_REF_PREFIX
from om_core.limits import MAX_RENDERED_MEMORY_BYTES
from om_core.models import Observation, Reflection
from om_core.redaction import normalize_secrets, redact
from om_core.relative_dates import MONTHS

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
    time order (:func:`in_time_order`), each dated when its ``observedAt`` is known
    (``- [om:<id>] (8 May 2023, 13:56 UTC) text``). Known secrets are redacted. The result
    never exceeds ``max_bytes`` (UTF-8, at most 256 KiB): lowest-relevance observations go
    first, then the oldest reflections, and a final line says how many were left out.
    Returns ``""`` when there is nothing to render.
    """
    max_bytes = min(max_bytes, MAX_RENDERED_MEMORY_BYTES)
    keys = normalize_secrets(secrets)
    outline_lines = [redact(line, keys) for line in outline or ()]
    observations = in_time_order(observations)
    ref_lines: list[str | None] = [
        _item(REFLECTION_REF_PREFIX, r.id, r.text, keys) for r in reflections
    ]
    obs_lines: list[str | None] = [
        _item(OBSERVATION_REF_PREFIX, o.id, o.text, keys, format_time(o.observed_at))
        for o in observations
    ]
    if not (outline_lines or ref_lines or obs_lines):
        return ""
    omitted = _omit_to_fit(outline_lines, ref_lines, obs_lines, observations, max_bytes)
    sections = [MEMORY_HEADING]
    if outline_lines:
        sections += ["", OUTLINE_HEADING, *outline_lines]
    kept_refs = [line for line in ref_lines if line is not None]
    kept_obs = [line for line in obs_lines if line is not None]
    if kept_refs:
        sections += ["", REFLECTIONS_HEADING, *kept_refs]
    if kept_obs:
        sections += ["", OBSERVATIONS_HEADING, *kept_obs]
    if omitted:
        sections += ["", _omitted_note(omitted)]
    return "\n".join(sections)


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


def _item(
    prefix: str, memory_id: str, text: str, secrets: tuple[str, ...], when: str | None = None
) -> str:
    # Continuation lines are indented so a multi-line text stays one list item.
    body = redact(text, secrets).replace("\n", "\n  ")
    dated = f"({when}) " if when else ""
    return f"- [{prefix}{memory_id}] {dated}{body}"


def _omitted_note(count: int) -> str:
    return f"({count} memories omitted to fit the size cap; recall them by id)"


def _bytes(line: str) -> int:
    return len(line.encode("utf-8"))


_HEADING_BYTES = {
    h: len(h.encode("utf-8"))
    for h in (OUTLINE_HEADING, REFLECTIONS_HEADING, OBSERVATIONS_HEADING, MEMORY_HEADING)
}
_NOTE_BYTES_BUT_COUNT = len(_omitted_note(0).encode("utf-8")) - 1


@dataclass
class _Layout:
    """Exact byte size of the rendering for the items still kept, updated per removal.

    Only running totals, so that each removal costs O(1) however many items there are.
    """

    outline_bytes: int
    outline_count: int
    ref_bytes: int
    ref_count: int
    obs_bytes: int
    obs_count: int
    omitted: int = 0

    def size(self) -> int:
        # Each section is a blank line, its heading and its lines; all joined by newlines.
        total, parts = _HEADING_BYTES[MEMORY_HEADING], 1
        for heading, count, lines in (
            (OUTLINE_HEADING, self.outline_count, self.outline_bytes),
            (REFLECTIONS_HEADING, self.ref_count, self.ref_bytes),
            (OBSERVATIONS_HEADING, self.obs_count, self.obs_bytes),
        ):
            if count:
                total += _HEADING_BYTES[heading] + lines + count - 1
                parts += 3
        if self.omitted:
            total += _NOTE_BYTES_BUT_COUNT + len(str(self.omitted))
            parts += 2
        return total + parts - 1


def _omit_to_fit(
    outline: list[str],
    refs: list[str | None],
    obs: list[str | None],
    observations: Sequence[Observation],
    max_bytes: int,
) -> int:
    """Blank out items (in place) until the rendering fits; return how many were left out."""
    layout = _Layout(
        outline_bytes=sum(_bytes(line) for line in outline),
        outline_count=len(outline),
        ref_bytes=sum(_bytes(x) for x in refs if x),
        ref_count=len(refs),
        obs_bytes=sum(_bytes(x) for x in obs if x),
        obs_count=len(obs),
    )
    # Lowest relevance first; among equals the oldest; then the oldest reflections.
    order = sorted(range(len(obs)), key=lambda i: (observations[i].relevance, i))
    victims: list[tuple[list[str | None], int]] = [(obs, i) for i in order]
    victims += [(refs, i) for i in range(len(refs))]
    for lines, index in victims:
        if layout.size() <= max_bytes:
            break
        line = lines[index]
        assert line is not None
        if lines is obs:
            layout.obs_bytes -= _bytes(line)
            layout.obs_count -= 1
        else:
            layout.ref_bytes -= _bytes(line)
            layout.ref_count -= 1
        lines[index] = None
        layout.omitted += 1
    # Only an outline too large on its own is left: cut it rather than break the cap.
    while outline and layout.size() > max_bytes:
        layout.outline_bytes -= _bytes(outline.pop())
        layout.outline_count -= 1
    return layout.omitted
