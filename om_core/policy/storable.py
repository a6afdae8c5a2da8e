"""Text no store can keep: the one rule a request body and a search's metadata narrowing
share.

U+0000 and lone UTF-16 surrogates are refused wherever text comes in: PostgreSQL refuses NUL
in text and JSONB, and on SQLite a stored lone surrogate made every later read of its session
fail. A decoded JSON string holds a surrogate only when it was a lone one: a valid
``\\ud83d\\ude00`` pair decodes to one astral character.
"""

from __future__ import annotations

import re
from typing import Final

UNSTORABLE_CHAR: Final = re.compile(r"[\x00\ud800-\udfff]")
"""NUL and UTF-16 surrogates."""


def char_problem(text: str) -> str | None:
    """What in ``text`` no store can keep (its first such character, named without quoting
    the text), or ``None``."""
    found = UNSTORABLE_CHAR.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "U+0000 (NUL)"
    return f"a lone surrogate (U+{ord(found.group()):04X})"
