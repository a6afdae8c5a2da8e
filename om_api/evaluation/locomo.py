"""Reading LoCoMo-format conversations (Maharana et al., ACL 2024) into plain, typed records.

A LoCoMo file is one JSON object: ``speaker_a``/``speaker_b``, ``session_N`` lists of turns
(``speaker``, ``dia_id`` such as ``D1:3``, ``text``, sometimes ``blip_caption``/``img_url``/
``query`` for a shared image), ``session_N_date_time`` (``"1:56 pm on 8 May, 2023"``) and
``qa`` (``question``, ``answer`` or ``adversarial_answer``, ``evidence`` dia ids, ``category``).
A file may also hold a list of such objects (the released ``locomo10.json``); each becomes
one :class:`Conversation`. Extra keys (``events_session_N``, ``session_N_observation`` ...) are
ignored. Nothing here knows where the data lives: callers pass paths.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from om_core.errors import InvalidInputError
from om_core.ledger.models import Role

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"^D(\d+):(\d+)$")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B, %Y", "%d %B %Y")

# The categories as numbered in the released data (the Mem0 and follow-up evaluations' names).
CATEGORY_NAMES: Mapping[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}


class LocomoFormatError(InvalidInputError):
    """A file is not LoCoMo-format JSON (message names the file and what is wrong)."""


@dataclass(frozen=True)
class Turn:
    """One utterance: ``role`` is ``user`` for speaker A and ``assistant`` for speaker B;
    ``text`` already carries the image caption as ``[image: ...]`` when the turn shared one."""

    dia_id: str
    speaker: str
    role: Role
    text: str


@dataclass(frozen=True)
class Session:
    """One LoCoMo session: its number, its date as written and parsed (``None`` when the text
    does not parse), and its turns in order."""

    number: int
    date_text: str
    date: datetime | None
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    """One QA item. ``answer`` is ``None`` for adversarial items (no gold answer); ``evidence``
    holds the dia ids as listed, split when one string names several."""

    index: int
    question: str
    answer: str | None
    evidence: tuple[str, ...]
    category: int

    @property
    def category_name(self) -> str:
        """The category's name, or ``category N`` for a number outside the known five."""
        return CATEGORY_NAMES.get(self.category, f"category {self.category}")


@dataclass(frozen=True)
class Conversation:
    """One two-person conversation with its questions."""

    name: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    @property
    def dia_ids(self) -> frozenset[str]:
        """Every turn's dia id."""
        return frozenset(t.dia_id for s in self.sessions for t in s.turns)


def parse_session_date(text: str) -> datetime | None:
    """``"1:56 pm on 8 May, 2023"`` as a naive datetime; ``None`` when no known form matches."""
    flat = " ".join(text.split())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(flat, fmt)
        except ValueError:
            continue
    return None


def turn_text(raw: Mapping[str, Any]) -> str:
    """A turn's text with its image caption appended as ``[image: caption]``.

    The caption is what a text-only agent would have been told about the image; the URL and
    search query are not part of the conversation and are left out.
    """
    text = str(raw.get("text") or "").strip()
    caption = raw.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        text = f"{text} [image: {caption.strip()}]".strip()
    return text


def parse_conversation(data: Mapping[str, Any], name: str) -> Conversation:
    """One conversation from its JSON object (the whole file, or its ``conversation`` key).

    Raises :class:`LocomoFormatError` when the speakers or every session are missing, or a
    turn lacks a speaker or dia id.
    """
    body = data.get("conversation", data)
    if not isinstance(body, Mapping):
        raise LocomoFormatError(f"{name}: 'conversation' is not an object")
    speaker_a, speaker_b = body.get("speaker_a"), body.get("speaker_b")
    if not isinstance(speaker_a, str) or not isinstance(speaker_b, str):
        raise LocomoFormatError(f"{name}: speaker_a and speaker_b must be strings")
    sessions = _sessions(body, name, speaker_a)
    if not sessions:
        raise LocomoFormatError(f"{name}: no session_N turn lists")
    raw_qa = data.get("qa", body.get("qa", []))
    if not isinstance(raw_qa, list):
        raise LocomoFormatError(f"{name}: 'qa' must be a list")
    questions = tuple(_question(i, q) for i, q in enumerate(raw_qa) if isinstance(q, Mapping))
    return Conversation(name, speaker_a, speaker_b, sessions, questions)


def _sessions(body: Mapping[str, Any], name: str, speaker_a: str) -> tuple[Session, ...]:
    numbered = sorted((int(m.group(1)), key) for key in body if (m := _SESSION_KEY.match(str(key))))
    sessions = []
    for number, key in numbered:
        raw_turns = body[key]
        if not isinstance(raw_turns, list) or not raw_turns:
            continue  # some files list dates for sessions that have no turns
        turns = []
        for raw in raw_turns:
            if not isinstance(raw, Mapping) or not raw.get("speaker") or not raw.get("dia_id"):
                raise LocomoFormatError(f"{name}: {key} has a turn without speaker or dia_id")
            speaker = str(raw["speaker"])
            role: Role = "user" if speaker == speaker_a else "assistant"
            turns.append(Turn(str(raw["dia_id"]), speaker, role, turn_text(raw)))
        date_text = str(body.get(f"{key}_date_time") or "")
        sessions.append(Session(number, date_text, parse_session_date(date_text), tuple(turns)))
    return tuple(sessions)


def _question(index: int, raw: Mapping[str, Any]) -> Question:
    answer = raw.get("answer")
    evidence: list[str] = []
    for item in raw.get("evidence") or ():
        evidence += [part for part in _EVIDENCE_SPLIT.split(str(item)) if part]
    category = raw.get("category")
    return Question(
        index=index,
        question=str(raw.get("question") or ""),
        answer=None if answer is None else str(answer),
        evidence=tuple(evidence),
        category=category if isinstance(category, int) else 0,
    )


def load_conversations(path: Path) -> list[Conversation]:
    """Every conversation in one file, named after the file (``26``, or ``26#2`` in a list).

    Raises :class:`LocomoFormatError` for invalid JSON or a malformed conversation, and
    ``OSError`` when the file cannot be read.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LocomoFormatError(f"{path}: not JSON ({exc})") from None
    if isinstance(data, Mapping):
        return [parse_conversation(data, path.stem)]
    if isinstance(data, list):
        return [
            parse_conversation(item, f"{path.stem}#{i + 1}")
            for i, item in enumerate(data)
            if isinstance(item, Mapping)
        ]
    raise LocomoFormatError(f"{path}: expected an object or a list of objects")


def data_files(paths: Iterable[Path]) -> tuple[list[Path], list[Path]]:
    """The JSON files named by ``paths`` (a directory stands for its ``*.json``, sorted) and
    the paths that do not exist."""
    found: list[Path] = []
    missing: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.glob("*.json") if p.is_file())
        elif path.is_file():
            found.append(path)
        else:
            missing.append(path)
    return found, missing


def dia_order(dia_id: str) -> tuple[int, int]:
    """Sort key of a dia id (session, turn); malformed ids sort last."""
    match = _DIA_ID.match(dia_id)
    return (int(match.group(1)), int(match.group(2))) if match else (1 << 30, 0)


def all_turns(conversation: Conversation) -> Sequence[Turn]:
    """Every turn of the conversation, in order."""
    return [t for s in conversation.sessions for t in s.turns]
