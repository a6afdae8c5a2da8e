"""The reflector: a window of active observations in, shorter reflections over them out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Unpack

from om_core.errors import InvalidInputError
from om_core.flush.prompts import REFLECTOR_INSTRUCTIONS
from om_core.flush.provider import Provider
from om_core.flush.workers.arguments import check_known, cited_ids, text_argument
from om_core.flush.workers.guards import (
    check_record_text,
    check_reflections_smaller,
    check_run_texts,
)
from om_core.flush.workers.protocol import (
    OBSERVATIONS_TAG,
    RECORD_REFLECTION,
    REFLECTION_TOOL,
    block,
    encode_line,
)
from om_core.flush.workers.tool_loop import ToolError, WorkerCall, WorkerRun, WorkerTool
from om_core.ledger.ids import create_memory_id
from om_core.ledger.models import Observation, Reflection, ReflectionsRecorded
from om_core.ledger.tokens import estimate_text_tokens
from om_core.policy.redaction import redact


def observation_lines(observations: Iterable[Observation], secrets: Iterable[str]) -> list[str]:
    """One prompt line per observation: id, time (when known), redacted text, relevance and
    token estimate. The time lets the model keep dates and tell older from recent."""
    known = tuple(secrets)
    lines = []
    for o in observations:
        value: dict[str, Any] = {"id": o.id}
        if o.observed_at:
            value["time"] = o.observed_at
        value["text"] = redact(o.text, known)
        value["relevance"] = o.relevance
        value["tokens"] = estimate_text_tokens(o.text)
        lines.append(encode_line(value))
    return lines


def run_reflector(
    provider: Provider,
    observations: Sequence[Observation],
    *,
    active: Iterable[Observation] | None = None,
    reflected_at: str | None = None,
    covers_up_to_id: str | None = None,
    **call: Unpack[WorkerCall],
) -> ReflectionsRecorded:
    """Reflect over ``observations`` (the window) and return the run's single record payload
    (``call``: the model, limits ... as :class:`~om_core.flush.workers.tool_loop.WorkerCall`).

    Reflections may cite any observation in ``active`` (default: the window). A reflection is
    a candidate, never committed as such: one not shorter (in tokens) than the observations
    it cites is refused with a tool error the model can act on (write it shorter), and of two
    over the same observations the shorter is kept. At the end, while the kept set is not
    smaller than the observations it cites, the candidate that saves least is left out
    (:func:`best_candidates`). The run fails closed with
    :class:`~om_core.errors.WorkerRunError` on a limit/protocol violation, a citation of an
    unknown or inactive observation, degenerate text, or when no candidate is left (an empty
    reflection is never committed).
    """
    if not observations:
        raise InvalidInputError("run_reflector needs at least one observation")
    run = WorkerRun(provider, call, REFLECTOR_INSTRUCTIONS)
    known = run.secrets
    citable = {o.id: o for o in (active if active is not None else observations)}
    # Candidates keyed by the set of observations they cite: a retry over the same set
    # competes with the earlier attempt instead of piling up beside it.
    candidates: dict[frozenset[str], Reflection] = {}

    def record(arguments: dict[str, Any]) -> dict[str, str]:
        reflection = _reflection(arguments, citable, known, reflected_at)
        new, old = _tokens([reflection.text]), _cited_tokens([reflection], citable)
        if new >= old:
            raise ToolError(
                f"not kept: the reflection is {new} tokens, not shorter than the {old} tokens "
                "of the observations it cites; write it shorter"
            )
        key = frozenset(reflection.observation_ids)
        earlier = candidates.get(key)
        if earlier is not None and _tokens([earlier.text]) <= new:
            raise ToolError(f"not kept: reflection {earlier.id} over the same ids is shorter")
        candidates[key] = reflection
        return {"id": reflection.id}

    prompt = block(OBSERVATIONS_TAG, observation_lines(observations, known))
    run.loop(prompt, WorkerTool(REFLECTION_TOOL, record))
    check_run_texts([r.text for r in candidates.values()])
    kept = best_candidates(list(candidates.values()), citable)
    cited = dict.fromkeys(oid for r in kept for oid in r.observation_ids)
    check_reflections_smaller([r.text for r in kept], [citable[oid].text for oid in cited])
    return ReflectionsRecorded(reflections=tuple(kept), covers_up_to_id=covers_up_to_id)


def best_candidates(
    candidates: list[Reflection], citable: Mapping[str, Observation]
) -> list[Reflection]:
    """The candidates (in recorded order) left once the set is smaller than what it cites.

    Each candidate is shorter than its own observations, but candidates citing the same
    observations can together outgrow them; then the one saving the smallest share of what
    it cites goes first, until the set shrinks memory. May return an empty list.
    """
    kept = list(candidates)
    while kept and _tokens([r.text for r in kept]) >= _cited_tokens(kept, citable):
        kept.remove(max(kept, key=lambda r: _tokens([r.text]) / _cited_tokens([r], citable)))
    return kept


def _tokens(texts: Iterable[str]) -> int:
    return sum(estimate_text_tokens(t) for t in texts)


def _cited_tokens(reflections: Iterable[Reflection], citable: Mapping[str, Observation]) -> int:
    """Tokens of the distinct observations ``reflections`` cite."""
    cited = dict.fromkeys(oid for r in reflections for oid in r.observation_ids)
    return _tokens(citable[oid].text for oid in cited)


def _reflection(
    arguments: dict[str, Any],
    citable: dict[str, Observation],
    secrets: tuple[str, ...],
    reflected_at: str | None,
) -> Reflection:
    check_known(RECORD_REFLECTION, arguments, ("text", "observationIds"))
    text = text_argument(RECORD_REFLECTION, arguments)
    refusal = "reflection cites {!r}, not a known active observation"
    cited = cited_ids(RECORD_REFLECTION, arguments, "observationIds", citable, refusal)
    return Reflection(
        id=create_memory_id(),
        text=redact(check_record_text(text), secrets),
        observation_ids=tuple(dict.fromkeys(cited)),
        reflected_at=reflected_at,
    )
