"""Small hand-written LoCoMo-format conversations whose right answers are known, and a builder.

:data:`CONVERSATION` (``tiny``) covers every scoring rule; :data:`OTHER` (``other``) is the
conversation whose context serves as its chance control (and the other way round): it mentions
one of ``tiny``'s answers at the same evidence position (``Pickle`` at ``D1:1``) and carries
another only in its session date (``2 March 2024``), so the grounded and ungrounded chance
figures differ. :func:`build` makes a conversation of any length from plain turns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SETTINGS = {"observation": {"messageTokens": 1}, "context": {"recentMessages": 2}}

CONVERSATION: dict[str, Any] = {
    "speaker_a": "Ana",
    "speaker_b": "Ben",
    "session_1_date_time": "10:00 am on 3 March, 2024",
    "session_1": [
        {
            "speaker": "Ana",
            "dia_id": "D1:1",
            "text": "I adopted a beagle named Pickle last weekend.",
            "img_url": ["https://example.invalid/dog.jpg"],
            "blip_caption": "a photo of a small dog on a sofa",
            "query": "beagle puppy",
        },
        {
            "speaker": "Ben",
            "dia_id": "D1:2",
            "text": "I finished my first marathon in Boston on 2 March 2024, what a day.",
        },
        {"speaker": "Ana", "dia_id": "D1:3", "text": "Nice."},
        {"speaker": "Ana", "dia_id": "D1:4", "text": "I visited the capital of Portugal in 2023."},
    ],
    "session_2_date_time": "4:30 pm on 10 March, 2024",
    "session_2": [
        {"speaker": "Ben", "dia_id": "D2:1", "text": "My sister Clara moved to Lisbon for work."},
        {"speaker": "Ana", "dia_id": "D2:2", "text": "I bought three new plants for my balcony."},
        {"speaker": "Ana", "dia_id": "D2:3", "text": "ok"},
    ],
    # A date without turns (the real files have these): no run for it.
    "session_3_date_time": "9:00 am on 1 April, 2024",
    "events_session_1": {"Ana": ["Ana adopts a dog."], "Ben": [], "date": "3 March, 2024"},
    "qa": [
        # 0: a name, in the evidence turn's observation.
        {"question": "What is the dog's name?", "answer": "Pickle", "evidence": ["D1:1"],
         "category": 4},
        # 1: a date written another way than in the evidence turn.
        {"question": "When did Ben run his marathon?", "answer": "March 2, 2024",
         "evidence": ["D1:2"], "category": 2},
        # 2: a bare number up to 31: left out of the string match (it would match anything).
        {"question": "How many plants did Ana buy?", "answer": 3, "evidence": ["D2:2"],
         "category": 1},
        # 3: two evidence turns in one string, as one real file has it; grounded by D2:1.
        {"question": "Where did Clara move?", "answer": "Lisbon", "evidence": ["D2:1; D1:2"],
         "category": 1},
        # 4: the answer is nowhere; the evidence is a turn too short to observe on its own.
        {"question": "What color is Ana's car?", "answer": "red", "evidence": ["D1:3"],
         "category": 4},
        # 5: adversarial: no gold answer, evidence still checked.
        {"question": "What is Ben's dog's name?", "adversarial_answer": "Pickle",
         "evidence": ["D1:1"], "category": 5},
        # 6: a long answer is not string-matched; unknown evidence is ignored.
        {"question": "How does Ana feel about dogs?",
         "answer": "She loves them and adopted one recently", "evidence": ["D1:1", "D9:9"],
         "category": 3},
        # 7: a yes/no answer: left out of the string match.
        {"question": "Did Ana adopt a dog?", "answer": "Yes, a beagle", "evidence": ["D1:1"],
         "category": 3},
        # 8: "Lisbon" is in the context (D2:1) but not in what is shown for the evidence turn
        # (D1:4 never names the city): ungrounded only.
        {"question": "Which city did Ana visit in 2023?", "answer": "Lisbon",
         "evidence": ["D1:4"], "category": 4},
    ],
}  # fmt: skip

# Expected per question index: (grounded, ungrounded, every evidence turn one recall away).
EXPECTED = {
    0: (True, True, True),
    1: (True, True, True),
    2: (None, None, True),
    3: (True, True, True),
    4: (False, False, True),
    5: (None, None, True),
    6: (None, None, True),
    7: (None, None, True),
    8: (False, True, True),
}
# Why questions are left out of the string match, by index.
LEFT_OUT = {2: "small_number", 5: "no_answer", 6: "long", 7: "yes_no"}

OTHER: dict[str, Any] = {
    "speaker_a": "Cy",
    "speaker_b": "Dee",
    "session_1_date_time": "9:00 am on 2 March, 2024",
    "session_1": [
        {"speaker": "Cy", "dia_id": "D1:1", "text": "My cat is called Pickle and sleeps a lot."},
        {"speaker": "Dee", "dia_id": "D1:2", "text": "I work at a bakery in Porto now."},
        {"speaker": "Cy", "dia_id": "D1:3", "text": "Sounds lovely."},
    ],
    "qa": [
        {"question": "What is Cy's cat called?", "answer": "Pickle", "evidence": ["D1:1"],
         "category": 4},
        {"question": "Where does Dee work?", "answer": "bakery in Porto", "evidence": ["D1:2"],
         "category": 4},
    ],
}  # fmt: skip


def build(
    sessions: Sequence[Sequence[str]],
    qa: Sequence[Mapping[str, Any]] = (),
    *,
    speakers: tuple[str, str] = ("Ana", "Ben"),
) -> dict[str, Any]:
    """A LoCoMo-format conversation: session ``n`` (from 1) holds the given turn texts, the
    speakers alternating, with dia ids ``Dn:k`` and a date a day apart from 1 May 2024."""
    out: dict[str, Any] = {"speaker_a": speakers[0], "speaker_b": speakers[1], "qa": list(qa)}
    for n, texts in enumerate(sessions, start=1):
        out[f"session_{n}_date_time"] = f"10:00 am on {n} May, 2024"
        out[f"session_{n}"] = [
            {"speaker": speakers[k % 2], "dia_id": f"D{n}:{k + 1}", "text": text}
            for k, text in enumerate(texts)
        ]
    return out


def write(
    folder: Path, name: str = "tiny.json", conversation: Mapping[str, Any] = CONVERSATION
) -> Path:
    """Write ``conversation`` (``tiny`` by default) as ``folder/name`` and return the path."""
    path = folder / name
    path.write_text(json.dumps(conversation), encoding="utf-8")
    return path
