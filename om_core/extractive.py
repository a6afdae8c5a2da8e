"""``ExtractiveProvider``: an offline, deterministic HEURISTIC that speaks the worker protocol.

There is no model here. The provider reads the same prompt a model would get (the system
message's ``Limits:`` line, the delimited ``<transcript>`` or ``<observations>`` block, the
dropper's ``Pool:`` line) and answers with the same tool calls a model would make:

* observer: one short observation per substantive, not-yet-seen message, citing that
  message, with a relevance score from simple cues (role, digits, decision/preference words);
* reflector: consecutive observations grouped in sixes into a clipped summary at most a
  quarter the size of what it cites;
* dropper: the lowest-relevance observations until the pool fits the stated target.

It extracts, it does not understand: summaries are clipped first sentences, relevance is a
keyword score. It exists so the whole pipeline runs without credentials (demo, tests, CI) and
so the protocol has a second, independent speaker.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from om_core.models import Message, ToolCall
from om_core.provider import ProviderRequest, ProviderResponse
from om_core.workers.protocol import (
    DROP_OBSERVATIONS,
    OBSERVATIONS_TAG,
    RECORD_OBSERVATION,
    RECORD_REFLECTION,
    TRANSCRIPT_TAG,
    parse_block,
    parse_limits,
    parse_pool,
)

MIN_SUBSTANTIVE_CHARS = 16
MIN_SUBSTANTIVE_WORDS = 3
SUMMARY_CHARS = 160
GROUP_SIZE = 6
REFLECTION_SHARE = 4  # a reflection is at most a quarter of what it cites
_ROLE_RELEVANCE = {"user": 0.6, "assistant": 0.45, "tool": 0.35}
_CUES = re.compile(
    r"\b(remember|important|must|always|never|decided|decision|prefer|deadline|error|failed|"
    r"fix(ed)?|todo|because|password|key|id)\b",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_DEFAULT_LIMITS = {"maxToolCallsPerTurn": 32, "maxToolCalls": 128, "maxTurns": 16}


class ExtractiveProvider:
    """Deterministic offline provider (a heuristic, not a model); see the module docstring.

    ``generate`` never raises for well-formed worker prompts; a request offering none of the
    three worker tools gets an assistant message without tool calls (a no-op turn).
    """

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        """Answer one worker turn with the next batch of planned tool calls."""
        system = request.messages[0].text if request.messages else ""
        prompt = request.messages[1].text if len(request.messages) > 1 else ""
        tools = {tool.name for tool in request.tools}
        limits = {**_DEFAULT_LIMITS, **parse_limits(system)}
        if RECORD_OBSERVATION in tools:
            plan = _plan_observations(prompt, limits)
        elif RECORD_REFLECTION in tools:
            plan = _plan_reflections(prompt)
        elif DROP_OBSERVATIONS in tools:
            plan = _plan_drop(prompt)
        else:
            plan = []
        done = sum(1 for m in request.messages if m.role == "tool")
        batch = plan[done : done + limits["maxToolCallsPerTurn"]]
        calls = tuple(
            ToolCall(id=f"call_{done + i}", name=name, arguments=arguments)
            for i, (name, arguments) in enumerate(batch)
        )
        return ProviderResponse(message=Message(role="assistant", tool_calls=calls))


Planned = tuple[str, dict[str, Any]]


def summarize(text: str, limit: int = SUMMARY_CHARS) -> str:
    """The first sentence of ``text`` (whitespace collapsed), clipped at a word to ``limit``."""
    flat = " ".join(text.split())
    first = _SENTENCE_END.split(flat, maxsplit=1)[0]
    if len(first) <= limit:
        return first
    clipped = first[:limit].rsplit(" ", 1)[0]
    return f"{clipped}…"


def relevance_of(role: str, text: str) -> float:
    """Heuristic relevance: a base per role, plus cues for numbers and decision words."""
    score = _ROLE_RELEVANCE.get(role, 0.4)
    if any(ch.isdigit() for ch in text):
        score += 0.15
    score += min(0.3, 0.15 * len(_CUES.findall(text)))
    return round(min(0.95, max(0.05, score)), 2)


def _substantive(text: str) -> bool:
    flat = " ".join(text.split())
    return len(flat) >= MIN_SUBSTANTIVE_CHARS and len(flat.split(" ")) >= MIN_SUBSTANTIVE_WORDS


def _plan_observations(prompt: str, limits: dict[str, int]) -> list[Planned]:
    seen: set[str] = set()
    plan: list[tuple[float, Planned]] = []
    for line in parse_block(prompt, TRANSCRIPT_TAG):
        text, role = str(line.get("text", "")), str(line.get("role", ""))
        if not _substantive(text):
            continue
        label = f"Tool {line['tool']}" if line.get("tool") else role.capitalize()
        observation = f"{label}: {summarize(text)}"
        key = observation.lower()
        if key in seen:
            continue  # a repeated message adds no new fact
        seen.add(key)
        relevance = relevance_of(role, text)
        arguments = {"text": observation, "sourceEntryIds": [line["id"]], "relevance": relevance}
        plan.append((relevance, (RECORD_OBSERVATION, arguments)))
    room = min(limits["maxToolCalls"], limits["maxTurns"] * limits["maxToolCallsPerTurn"])
    if len(plan) > room:
        # More messages than calls allowed: keep the most relevant, in transcript order.
        keep = sorted(range(len(plan)), key=lambda i: (-plan[i][0], i))[:room]
        plan = [plan[i] for i in sorted(keep)]
    return [planned for _, planned in plan]


def _plan_reflections(prompt: str) -> list[Planned]:
    observations = parse_block(prompt, OBSERVATIONS_TAG)
    groups = [observations[i : i + GROUP_SIZE] for i in range(0, len(observations), GROUP_SIZE)]
    if len(groups) > 1 and len(groups[-1]) < 2:
        groups[-2].extend(groups.pop())
    plan: list[Planned] = []
    for group in groups:
        planned = _reflection(group)
        if planned is not None:
            plan.append(planned)
    return plan


def _reflection(group: Sequence[dict[str, Any]]) -> Planned | None:
    if len(group) < 2:
        return None
    cited_chars = sum(len(str(o.get("text", ""))) for o in group)
    parts = [summarize(_strip_label(str(o.get("text", ""))), 32) for o in group]
    text = "; ".join(parts)
    cap = cited_chars // REFLECTION_SHARE
    if len(text) > cap:
        text = text[:cap].rsplit(" ", 1)[0]
    if not text.strip() or -(-len(text) // 4) >= sum(int(o.get("tokens", 0)) for o in group):
        return None
    return RECORD_REFLECTION, {"text": text, "observationIds": [str(o["id"]) for o in group]}


def _strip_label(text: str) -> str:
    head, sep, rest = text.partition(": ")
    return rest if sep and len(head) <= 40 else text


def _plan_drop(prompt: str) -> list[Planned]:
    pool = parse_pool(prompt)
    target = int(pool.get("targetTokens", 0))
    observations = parse_block(prompt, OBSERVATIONS_TAG)
    remaining = sum(int(o.get("tokens", 0)) for o in observations)
    order = sorted(range(len(observations)), key=lambda i: (observations[i]["relevance"], i))
    ids: list[str] = []
    for index in order:
        if remaining <= target:
            break
        ids.append(str(observations[index]["id"]))
        remaining -= int(observations[index].get("tokens", 0))
    return [(DROP_OBSERVATIONS, {"observationIds": ids})] if ids else []
