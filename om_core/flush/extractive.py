"""``ExtractiveProvider``: an offline, deterministic HEURISTIC that speaks the worker protocol.

There is no model here. The provider reads the same prompt a model would get (the system
message's ``Limits:`` line, the delimited ``<transcript>`` or ``<observations>`` block, the
dropper's ``Pool:`` line) and answers with the same tool calls a model would make:

* observer: every transcript line is cited by some observation. A substantive message gets
  its label (``User:``, ``Assistant:``, ``Tool <name>:``), its first substantive sentence,
  then up to :data:`MAX_EXTRA_SENTENCES` of its most salient other sentences or lines, in
  original order, within :data:`OBSERVATION_CHARS`. Salient means carrying a recognizable
  fact: numbers, dates, capitalized names, identifiers (snake_case, dotted hosts and files,
  paths, URLs, emails, hex ids, ``key=value``), ``key: value`` pairs, decision and preference
  words. Relative dates ("yesterday", "last week", "two weeks ago") get their absolute date in
  brackets when the line carries a parseable ``time``. An exact repeat (same speaker, same
  normalized text) is cited by the observation of its first occurrence; small talk ("Thanks!",
  "ok", "Hey Dave!") by the observation of the nearest earlier message, else the next one, or,
  in a batch without any substantive message, by one short small-talk observation. When the
  call budget is smaller than the plan, the lowest-relevance observation merges into a
  neighbour (its sources always, its text if there is room) until the plan fits.
* reflector: consecutive observations grouped in sixes into a clipped summary at most a
  quarter the size of what it cites;
* dropper: the lowest-relevance observations until the pool fits the stated target.

It extracts, it does not understand: salience is a count of surface patterns, small talk a
short word list, relevance a keyword score; a sentence with no recognizable fact is left out
of the text (its message stays cited, one recall away). It exists so the whole pipeline runs
without credentials (demo, tests, CI) and so the protocol has a second, independent speaker.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from om_core.flush.provider import ProviderRequest, ProviderResponse
from om_core.flush.workers.protocol import (
    DROP_OBSERVATIONS,
    OBSERVATIONS_TAG,
    RECORD_OBSERVATION,
    RECORD_REFLECTION,
    TRANSCRIPT_TAG,
    parse_block,
    parse_limits,
    parse_pool,
)
from om_core.ledger.models import Message, ToolCall
from om_core.ledger.relative_dates import (
    MONTHS,
    RELATIVE_DATE,
    WEEKDAYS,
    anchor_relative_dates,
    message_day,
)

MIN_SUBSTANTIVE_CHARS = 16
MIN_SUBSTANTIVE_WORDS = 3
SUMMARY_CHARS = 160
# One observation's text, label included: room for a lead and a few salient sentences, far
# below the record guard's runaway cap, cheap to render in every context.
OBSERVATION_CHARS = 400
# Beyond a few salient sentences (long listings, tables) detail is cheaper recalled by id than
# carried in every rendered memory, and reflections over it would grow with it.
MAX_EXTRA_SENTENCES = 3
# A budget merge joins text only with this much room left; a sliver would be noise.
MIN_JOIN_CHARS = 40
SMALL_TALK_RELEVANCE = 0.1
GROUP_SIZE = 6
REFLECTION_SHARE = 6  # a reflection is at most a sixth of what it cites
_ROLE_RELEVANCE = {"user": 0.6, "assistant": 0.45, "tool": 0.35}
_CUES = re.compile(
    r"\b(remember|important|must|always|never|decided|decision|prefer|deadline|error|failed|"
    r"fix(ed)?|todo|because|password|key|id)\b",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_DEFAULT_LIMITS = {"maxToolCallsPerTurn": 32, "maxToolCalls": 128, "maxTurns": 16}

_NUMBER = re.compile(r"\d")
# Identifiers, each kind with the mark it cannot be without. The observer asks this of every
# message and sentence it drafts, and a pattern scans a whole text to find it has no match
# (a kilobyte of tool output took 280 us); a substring test for the mark takes well under one.
_IDENTIFIER_KINDS = (
    ("://", re.compile(r"https?://\S+")),  # URLs
    ("@", re.compile(r"[\w.+-]+@[\w-]+\.\w+")),  # emails
    ("_", re.compile(r"\b\w+(?:_\w+)+\b")),  # snake_case
    (".", re.compile(r"\b[\w-]++(?:\.[\w-]++)*\.[A-Za-z][\w-]*\b")),  # hosts, files, modules
    ("/", re.compile(r"(?<![\w/])~?/[\w.-]+")),  # absolute and home paths
    ("=", re.compile(r"\b[\w.-]+=\S")),  # key=value
)
_HEX_ID = re.compile(r"\b[0-9a-f]{7,}\b")
_KEY_VALUE = re.compile(r"\b[\w.-]+: \S")
_PREFERENCE = re.compile(
    r"\b(?:(?:prefer|like|love|hate|enjoy|want|plan|decide)(?:s|d|n?ed|n?ing)?|favou?rite)\b", re.I
)
# fmt: off
# Words that make up acknowledgements and greetings, in any order (plus names).
_SMALL_TALK = frozenset((
    "ok", "okay", "k", "thanks", "thank", "thx", "ty", "you", "so", "much", "a", "lot", "very",
    "hi", "hello", "hey", "bye", "goodbye", "see", "ya", "later", "yes", "yeah", "yep", "no",
    "nope", "sure", "great", "cool", "nice", "awesome", "good", "morning", "evening", "night",
    "got", "it", "sounds", "perfect", "welcome", "cheers", "there", "lol", "haha", "wow",
    "alright", "fine", "sorry", "oh", "and", "too", "for", "that",
))
# fmt: on
_CALENDAR = re.compile(r"\b(?:" + "|".join((*MONTHS, *(d.capitalize() for d in WEEKDAYS))) + r")\b")
_NAME = re.compile(r"(?<=\s)[^\W\d_]\w+")  # a word after the first; kept if capitalized
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")
_MERGE_GLUE = " | "  # between the texts of messages merged to fit the call budget
_DELIMITER = re.compile(r"<(/?)(transcript|observations)>")


Planned = tuple[str, dict[str, Any]]
_PlanKey = tuple[str, str, frozenset[str]]


class ExtractiveProvider:
    """Deterministic offline provider (a heuristic, not a model); see the module docstring.

    ``generate`` never raises for well-formed worker prompts; a request offering none of the
    three worker tools gets an assistant message without tool calls (a no-op turn).

    A run's plan is a function of its system message, prompt and tools alone, and every turn
    of the run sends the same three: the instance keeps the last plan it made, so the later
    turns of a run (the one that ends it included) slice it instead of planning again.
    """

    _last_plan: tuple[_PlanKey, list[Planned], int] | None = None

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        """Answer one worker turn with the next batch of planned tool calls."""
        plan, per_turn = self._plan(request)
        done = sum(1 for m in request.messages if m.role == "tool")
        batch = plan[done : done + per_turn]
        calls = tuple(
            ToolCall(id=f"call_{done + i}", name=name, arguments=arguments)
            for i, (name, arguments) in enumerate(batch)
        )
        return ProviderResponse(message=Message(role="assistant", tool_calls=calls))

    def _plan(self, request: ProviderRequest) -> tuple[list[Planned], int]:
        """The run's whole plan and the calls allowed per turn (kept for the run's next turn)."""
        system = request.messages[0].text if request.messages else ""
        prompt = request.messages[1].text if len(request.messages) > 1 else ""
        key = (system, prompt, frozenset(tool.name for tool in request.tools))
        last = self._last_plan
        if last is not None and last[0] == key:
            return last[1], last[2]
        limits = {**_DEFAULT_LIMITS, **parse_limits(system)}
        tools = key[2]
        if RECORD_OBSERVATION in tools:
            plan = _plan_observations(prompt, limits)
        elif RECORD_REFLECTION in tools:
            plan = _plan_reflections(prompt, limits)
        elif DROP_OBSERVATIONS in tools:
            plan = _plan_drop(prompt)
        else:
            plan = []
        self._last_plan = (key, plan, limits["maxToolCallsPerTurn"])
        return plan, limits["maxToolCallsPerTurn"]


@dataclass
class _Draft:
    """An observation being planned; ``sources`` are transcript line indexes."""

    text: str
    relevance: float
    sources: list[int]


def summarize(text: str, limit: int = SUMMARY_CHARS) -> str:
    """The first sentence of ``text`` (whitespace collapsed), clipped at a word to ``limit``."""
    flat = " ".join(text.split())
    return _clip(_SENTENCE_END.split(flat, maxsplit=1)[0], limit)


def relevance_of(role: str, text: str) -> float:
    """Heuristic relevance: a base per role, plus cues for numbers and decision words."""
    score = _ROLE_RELEVANCE.get(role, 0.4)
    if any(ch.isdigit() for ch in text):
        score += 0.15
    score += min(0.3, 0.15 * len(_CUES.findall(text)))
    return round(min(0.95, max(0.05, score)), 2)


def _clip(text: str, limit: int) -> str:
    """``text`` cut at a word so that, with the ellipsis, it is at most ``limit`` characters."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    word_end = cut.rfind(" ")
    # Cut inside a token only when it is so long (an id, a blob) that a word cut would lose most
    # of the room.
    return f"{cut[:word_end] if word_end > limit // 2 else cut}…"


def _has_identifier(text: str) -> bool:
    """A URL, email, snake_case or dotted name, path, hex id or ``key=value`` in ``text``."""
    if any(mark in text and pattern.search(text) for mark, pattern in _IDENTIFIER_KINDS):
        return True
    return _HEX_ID.search(text) is not None


def _has_fact(text: str) -> bool:
    """Numbers and identifiers make even a two-word line ("port 5433") worth recording."""
    return _NUMBER.search(text) is not None or _has_identifier(text)


def _small_talk(text: str) -> bool:
    """Greeting and thanks words only, plus names ("Thank you so much, Dave!")."""
    words = _WORD.findall(text)
    return all(w.lower() in _SMALL_TALK or (i and w[0].isupper()) for i, w in enumerate(words))


def _substantive(text: str) -> bool:
    if _has_fact(text):
        return True
    long_enough = len(" ".join(text.split())) >= MIN_SUBSTANTIVE_CHARS
    return (
        long_enough and len(_WORD.findall(text)) >= MIN_SUBSTANTIVE_WORDS and not _small_talk(text)
    )


def _salience(segment: str) -> int:
    """How many kinds of fact a sentence carries (names and cue words count up to two)."""
    kinds = (_NUMBER, _KEY_VALUE, _CALENDAR, RELATIVE_DATE, _PREFERENCE)
    found = sum(1 for kind in kinds if kind.search(segment)) + _has_identifier(segment)
    names = sum(1 for w in _NAME.findall(segment) if w[0].isupper())
    cues = len(_CUES.findall(segment))
    return found + min(2, names) + min(2, cues)


def _segments(text: str) -> list[str]:
    """Lines (tool output, lists) and, within each line, sentences."""
    segments: list[str] = []
    for line in text.splitlines():
        flat = " ".join(line.split())
        segments.extend(s for s in _SENTENCE_END.split(flat) if s)
    return segments


def _render(label: str, segments: Sequence[str], chosen: set[int]) -> str:
    body = ""
    for index in sorted(chosen):
        glue = " " if not body or body[-1] in ".!?;:…" else "; "
        body = f"{body}{glue}{segments[index]}" if body else segments[index]
    return f"{label}: {body}"


def _observation_text(label: str, text: str, day: date | None) -> str:
    """Label, first substantive sentence, then the most salient others that fit the budget."""
    segments = [anchor_relative_dates(s, day) for s in _segments(text)]
    lead = next((i for i, s in enumerate(segments) if _substantive(s)), None)
    # Substantive only as a whole ("Yes. I do. It is."): keep it whole.
    chosen = set(range(len(segments))) if lead is None else {lead}
    # A short sentence ("I like cats.") may follow the lead, small talk ("Hey Dave!") never.
    extra = [lead is not None and (_has_fact(s) or not _small_talk(s)) for s in segments]
    scores = [_salience(s) if ok else 0 for s, ok in zip(segments, extra, strict=True)]
    for index in sorted(range(len(segments)), key=lambda i: (-scores[i], i)):
        if scores[index] == 0 or len(chosen) > MAX_EXTRA_SENTENCES:
            break
        if index != lead and len(_render(label, segments, chosen | {index})) <= OBSERVATION_CHARS:
            chosen.add(index)
    # Quoted prompt delimiters would get the record rejected: keep them, defused.
    return _DELIMITER.sub(r"‹\1\2›", _clip(_render(label, segments, chosen), OBSERVATION_CHARS))


def _label(line: dict[str, Any]) -> str:
    return f"Tool {line['tool']}" if line.get("tool") else str(line.get("role", "")).capitalize()


def _draft_observations(lines: Sequence[dict[str, Any]]) -> tuple[list[_Draft], list[int | None]]:
    """One draft per distinct substantive message, and each line's draft (``None``: small talk)."""
    drafts: list[_Draft] = []
    owners: list[int | None] = []
    by_content: dict[str, int] = {}
    by_text: dict[str, int] = {}
    for index, line in enumerate(lines):
        text, label = str(line.get("text", "")), _label(line)
        if not _substantive(text):
            owners.append(None)
            continue
        content = f"{label}\n{' '.join(text.split()).lower()}"
        owner = by_content.get(content)
        if owner is None:
            observation = _observation_text(label, text, message_day(line.get("time")))
            # Two messages clipped to one text would also trip the run's repeat guard.
            owner = by_text.get(observation.lower())
            if owner is None:
                owner = len(drafts)
                relevance = relevance_of(str(line.get("role", "")), text)
                drafts.append(_Draft(observation, relevance, []))
                by_text[observation.lower()] = owner
            by_content[content] = owner
        drafts[owner].sources.append(index)
        owners.append(owner)
    return drafts, owners


def _cite_small_talk(drafts: list[_Draft], owners: Sequence[int | None]) -> None:
    """Each small-talk line joins the draft of the nearest earlier message, else the next."""
    previous: int | None = None
    pending: list[int] = []
    for index, owner in enumerate(owners):
        if owner is not None:
            previous = owner
            drafts[owner].sources.extend(pending)
            pending = []
        elif previous is not None:
            drafts[previous].sources.append(index)
        else:
            pending.append(index)


def _small_talk_draft(lines: Sequence[dict[str, Any]]) -> _Draft:
    """One observation citing a batch that holds small talk only, so no line goes uncited."""
    speakers = list(dict.fromkeys(_label(line).lower() for line in lines))
    text = f"{' and '.join(speakers).capitalize()} made small talk."
    return _Draft(text, SMALL_TALK_RELEVANCE, list(range(len(lines))))


def _merge(keep: _Draft, extra: _Draft, extra_first: bool) -> _Draft:
    """``keep`` citing ``extra``'s sources too, and holding its text (clipped) if there is room."""
    room = OBSERVATION_CHARS - len(keep.text) - len(_MERGE_GLUE)
    text = keep.text
    if room >= MIN_JOIN_CHARS:
        parts = [_clip(extra.text, room), keep.text]
        text = _MERGE_GLUE.join(parts if extra_first else parts[::-1])
    sources = keep.sources + extra.sources
    return _Draft(text, max(keep.relevance, extra.relevance), sources)


def _merge_lowest(drafts: list[_Draft]) -> None:
    """Fold the lowest-relevance draft into the neighbour with more room for its text."""
    low = min(range(len(drafts)), key=lambda i: (drafts[i].relevance, len(drafts[i].sources), i))
    neighbours = [j for j in (low - 1, low + 1) if 0 <= j < len(drafts)]
    into = min(neighbours, key=lambda j: (len(drafts[j].text), j))
    drafts[into] = _merge(drafts[into], drafts[low], extra_first=low < into)
    del drafts[low]


def _plan_observations(prompt: str, limits: dict[str, int]) -> list[Planned]:
    lines = parse_block(prompt, TRANSCRIPT_TAG)
    if not lines:
        return []
    drafts, owners = _draft_observations(lines)
    if drafts:
        _cite_small_talk(drafts, owners)
    else:
        drafts = [_small_talk_draft(lines)]
    room = max(1, min(limits["maxToolCalls"], limits["maxTurns"] * limits["maxToolCallsPerTurn"]))
    while len(drafts) > room:
        _merge_lowest(drafts)
    return [_planned(draft, lines) for draft in drafts]


def _planned(draft: _Draft, lines: Sequence[dict[str, Any]]) -> Planned:
    ids = [str(lines[i]["id"]) for i in sorted(set(draft.sources))]
    arguments = {"text": draft.text, "sourceEntryIds": ids, "relevance": draft.relevance}
    return RECORD_OBSERVATION, arguments


def _plan_reflections(prompt: str, limits: dict[str, int]) -> list[Planned]:
    observations = parse_block(prompt, OBSERVATIONS_TAG)
    # Groups grow past six when six would need more calls than the run may make: a plan
    # over the budget fails the whole run, and nothing gets reflected.
    room = min(limits["maxToolCalls"], limits["maxTurns"] * limits["maxToolCallsPerTurn"])
    size = max(GROUP_SIZE, -(-len(observations) // max(1, room)))
    groups = [observations[i : i + size] for i in range(0, len(observations), size)]
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
