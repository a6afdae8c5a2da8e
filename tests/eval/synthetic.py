"""A tiny hand-written LoCoMo-format conversation whose right answers are known."""

from __future__ import annotations

import json
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
            "text": "Congratulations! I finished my first marathon in Boston on 2 March 2024.",
        },
        {"speaker": "Ana", "dia_id": "D1:3", "text": "Nice."},
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
        # 0: a name, stated by Ana and observed.
        {"question": "What is the dog's name?", "answer": "Pickle", "evidence": ["D1:1"],
         "category": 4},
        # 1: a date written another way than in the text.
        {"question": "When did Ben run his marathon?", "answer": "March 2, 2024",
         "evidence": ["D1:2"], "category": 2},
        # 2: a count written as a digit, said as a word, in the recent window.
        {"question": "How many plants did Ana buy?", "answer": 3, "evidence": ["D2:2"],
         "category": 1},
        # 3: two evidence turns in one string, as one real file has it.
        {"question": "Where did Clara move?", "answer": "Lisbon", "evidence": ["D2:1; D1:2"],
         "category": 1},
        # 4: the answer is nowhere; the evidence is a turn too short to observe.
        {"question": "What color is Ana's car?", "answer": "red", "evidence": ["D1:3"],
         "category": 4},
        # 5: adversarial: no gold answer, evidence still checked.
        {"question": "What is Ben's dog's name?", "adversarial_answer": "Pickle",
         "evidence": ["D1:1"], "category": 5},
        # 6: a long answer is not scored for answer-in-context; unknown evidence is ignored.
        {"question": "How does Ana feel about dogs?",
         "answer": "She loves them and adopted one recently", "evidence": ["D1:1", "D9:9"],
         "category": 3},
    ],
}  # fmt: skip

# Expected per question index: (answer in context, evidence one hop).
EXPECTED = {
    0: (True, True),
    # The extractive observer keeps a message's first sentence ("Congratulations!"): the date
    # after it is one recall away, not in the context.
    1: (False, True),
    2: (True, True),
    3: (True, True),
    4: (False, False),
    5: (None, True),
    6: (None, True),
}


def write(folder: Path, name: str = "tiny.json") -> Path:
    """Write the conversation as ``folder/name`` and return the path."""
    path = folder / name
    path.write_text(json.dumps(CONVERSATION), encoding="utf-8")
    return path
