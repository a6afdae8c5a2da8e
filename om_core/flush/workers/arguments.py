"""Reading a worker tool call's arguments as the protocol (:mod:`.protocol`) defines them.

Each reader refuses what the model got wrong with the error the run fails closed with: an
unknown argument or a text that is no string is a
:class:`~om_core.errors.WorkerProtocolError`, a missing or empty id list, or an id the run
may not cite, a :class:`~om_core.errors.WorkerCitationError`.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping
from typing import Any

from om_core.errors import WorkerCitationError, WorkerProtocolError


def check_known(tool: str, arguments: Mapping[str, Any], known: Collection[str]) -> None:
    """Refuse an argument ``tool`` does not take."""
    extra = set(arguments) - set(known)
    if extra:
        raise WorkerProtocolError(f"{tool} got unknown arguments {sorted(extra)}")


def text_argument(tool: str, arguments: Mapping[str, Any]) -> str:
    """The call's ``text``; refused unless it is a string."""
    text = arguments.get("text")
    if not isinstance(text, str):
        raise WorkerProtocolError(f"{tool} needs a string text")
    return text


def cited_ids(
    tool: str, arguments: Mapping[str, Any], key: str, citable: Container[str], refusal: str
) -> list[str]:
    """The non-empty list of ids under ``key``, each one in ``citable``; ``refusal`` says why
    another is refused (``{!r}`` stands for the id)."""
    ids = arguments.get(key)
    if not isinstance(ids, list) or not ids:
        raise WorkerCitationError(f"{tool} needs a non-empty {key} list")
    for value in ids:
        if not isinstance(value, str) or value not in citable:
            raise WorkerCitationError(refusal.format(value))
    return ids
