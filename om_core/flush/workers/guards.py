"""Output guards learned from systems in the field: reject degenerate or inflating output.

A model stuck in a loop repeats lines or runs on; a reflector can "summarize" into something
as long as its input. Committing either poisons memory for the rest of the session, so the
run fails closed instead and the runtime's backoff stops it from retrying forever.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from om_core.errors import WorkerOutputRejectedError
from om_core.ledger.tokens import estimate_text_tokens

# One record's text: longer than this is runaway output, not an observation.
MAX_RECORD_CHARS = 2_000
# The same non-trivial line this many times (within one record or across a run) is a loop.
MAX_LINE_REPEATS = 3
_MIN_LINE_CHARS = 8
_DELIMITERS = ("<transcript>", "</transcript>", "<observations>", "</observations>")


def check_record_text(text: str) -> str:
    """The stripped text of one record, or :class:`WorkerOutputRejectedError`.

    Rejects empty text, text longer than :data:`MAX_RECORD_CHARS` characters, text quoting the
    prompt delimiters, and text repeating one line :data:`MAX_LINE_REPEATS` times or more.
    """
    stripped = text.strip()
    if not stripped:
        raise WorkerOutputRejectedError("record text is empty")
    if len(stripped) > MAX_RECORD_CHARS:
        raise WorkerOutputRejectedError(
            f"record text is {len(stripped)} characters (runaway; max {MAX_RECORD_CHARS})"
        )
    if any(delimiter in stripped for delimiter in _DELIMITERS):
        raise WorkerOutputRejectedError("record text quotes the prompt delimiters")
    _check_repeats(stripped.splitlines(), "within one record")
    return stripped


def check_run_texts(texts: Sequence[str]) -> None:
    """Reject a run whose records repeat one text :data:`MAX_LINE_REPEATS` times or more."""
    _check_repeats(texts, "across the run")


def _check_repeats(lines: Iterable[str], where: str) -> None:
    counts = Counter(
        normalized for line in lines if len(normalized := " ".join(line.split()).lower()) >= 1
    )
    for line, count in counts.items():
        if count >= MAX_LINE_REPEATS and len(line) >= _MIN_LINE_CHARS:
            raise WorkerOutputRejectedError(f"degenerate output: a line repeats {count}x {where}")


def check_reflections_smaller(
    reflection_texts: Sequence[str], replaced_texts: Sequence[str]
) -> None:
    """Reject an empty reflection set, or one not smaller in tokens than what it replaces.

    Tokens are :func:`om_core.ledger.tokens.estimate_text_tokens` summed over each side.
    """
    if not reflection_texts:
        raise WorkerOutputRejectedError("empty reflection set")
    new = sum(estimate_text_tokens(t) for t in reflection_texts)
    old = sum(estimate_text_tokens(t) for t in replaced_texts)
    if new >= old:
        raise WorkerOutputRejectedError(
            f"reflections are {new} tokens, not smaller than the {old} tokens they replace"
        )
