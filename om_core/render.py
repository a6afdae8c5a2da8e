"""Rendering prepared memory: reflections, then observations, within the 256 KiB cap."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from om_core.ids import OBSERVATION_REF_PREFIX, REFLECTION_REF_PREFIX
from om_core.limits import MAX_RENDERED_MEMORY_BYTES
from om_core.models import Observation, Reflection
from om_core.redaction import normalize_secrets, redact

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

    Each item shows its recall id (``reflection:<id>`` / ``om:<id>``). Known secrets are
    redacted. The result never exceeds ``max_bytes`` (UTF-8, at most the seed's 256 KiB):
    lowest-relevance observations go first, then the oldest reflections, and a final line
    says how many were left out. Returns ``""`` when there is nothing to render.
    """
    max_bytes = min(max_bytes, MAX_RENDERED_MEMORY_BYTES)
    keys = normalize_secrets(secrets)
    outline_lines = [redact(line, keys) for line in outline or ()]
    ref_lines: list[str | None] = [
        _item(REFLECTION_REF_PREFIX, r.id, r.text, keys) for r in reflections
    ]
    obs_lines: list[str | None] = [
        _item(OBSERVATION_REF_PREFIX, o.id, o.text, keys) for o in observations
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


def _item(prefix: str, memory_id: str, text: str, secrets: tuple[str, ...]) -> str:
    # Continuation lines are indented so a multi-line text stays one list item.
    body = redact(text, secrets).replace("\n", "\n  ")
    return f"- [{prefix}{memory_id}] {body}"


def _omitted_note(count: int) -> str:
    return f"({count} memories omitted to fit the size cap; recall them by id)"


def _size(line: str) -> int:
    return len(line.encode("utf-8")) + 1


def _omit_to_fit(
    outline: list[str],
    refs: list[str | None],
    obs: list[str | None],
    observations: Sequence[Observation],
    max_bytes: int,
) -> int:
    """Blank out items (in place) until the rendering fits; return how many were left out."""
    headings = MEMORY_HEADING, OUTLINE_HEADING, REFLECTIONS_HEADING, OBSERVATIONS_HEADING
    fixed = sum(_size(h) + 1 for h in headings) + sum(_size(line) for line in outline)
    total = fixed + sum(_size(x) for x in refs if x) + sum(_size(x) for x in obs if x)
    budget = max_bytes - _size(_omitted_note(len(refs) + len(obs)))
    if total <= max_bytes:
        return 0
    # Lowest relevance first; among equals the oldest first.
    order = sorted(range(len(obs)), key=lambda i: (observations[i].relevance, i))
    victims: list[tuple[list[str | None], int]] = [(obs, i) for i in order]
    victims += [(refs, i) for i in range(len(refs))]
    omitted = 0
    for lines, index in victims:
        if total <= budget:
            break
        line = lines[index]
        assert line is not None
        total -= _size(line)
        lines[index] = None
        omitted += 1
    if total > budget:
        # Only the outline is left and it alone is too large: cut it, never the cap.
        while outline and total > budget:
            total -= _size(outline.pop())
    return omitted
