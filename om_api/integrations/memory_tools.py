"""The two memory tools a framework adapter gives its agent, on the agent's own session:
``search_memory`` finds past messages and memory by words, and ``recall_memory`` reads the
exact messages behind a memory id of the context or of a hit.

Each answers the model in text (:mod:`~om_api.integrations.memory_text`, as the MCP tools
do). A failed API call is answered too, as one line the model can act on (not found,
invalid, rate limited, unavailable): a tool that raised would end the agent's run over what
is only a missing detail. An adapter wraps each of :meth:`MemoryTools.named` in its
framework's tool type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, NamedTuple

from om_api.client import AsyncOMClient, OMClient, OMClientError
from om_api.integrations.memory_text import (
    describe_error,
    recall_problem,
    recall_text,
    search_text,
)

SEARCH_HITS: Final = 10
"""Hits a search answers with."""
_SEARCH: Final = (
    "search_memory",
    "Find earlier messages and memory of this conversation by words, best first: each hit "
    "is an id ([om:...] or [reflection:...] for a memory, to pass to recall_memory, or a "
    "message id) with a snippet, matches in «». Use it when the context does not hold a "
    "detail the user refers to. query: the words to look for; any of them matches.",
)
_RECALL: Final = (
    "recall_memory",
    "Read the exact messages a memory rests on, before relying on its detail. memory_id: an "
    "id of the context or of a search hit, such as om:0123456789ab or "
    "reflection:0123456789ab (the 12 hex digits alone work too).",
)


class Named(NamedTuple):
    """One tool as the model sees it: its name, its description and its function."""

    name: str
    description: str
    function: Callable[[str], str]


class AsyncNamed(NamedTuple):
    """:class:`Named`, with a coroutine function."""

    name: str
    description: str
    function: Callable[[str], Awaitable[str]]


@dataclass(frozen=True)
class MemoryTools:
    """The memory tools on ``session_id`` through a synchronous client."""

    client: OMClient
    session_id: str

    def named(self) -> list[Named]:
        """``search_memory`` and ``recall_memory``, each with its name and description."""
        return [Named(*_SEARCH, self.search), Named(*_RECALL, self.recall)]

    def search(self, query: str) -> str:
        """The session's best :data:`SEARCH_HITS` hits for ``query``."""
        try:
            page = self.client.search(query, session_id=self.session_id, limit=SEARCH_HITS)
        except OMClientError as exc:
            return describe_error(exc)
        return search_text(query, page)

    def recall(self, memory_id: str) -> str:
        """The memory ``memory_id`` and its source messages."""
        try:
            found = self.client.recall(self.session_id, memory_id)
        except OMClientError as exc:
            return describe_error(exc)
        return recall_problem(found, self.session_id, memory_id) or recall_text(found)


@dataclass(frozen=True)
class AsyncMemoryTools:
    """:class:`MemoryTools` through an asynchronous client."""

    client: AsyncOMClient
    session_id: str

    def named(self) -> list[AsyncNamed]:
        """``search_memory`` and ``recall_memory``, each with its name and description."""
        return [AsyncNamed(*_SEARCH, self.search), AsyncNamed(*_RECALL, self.recall)]

    async def search(self, query: str) -> str:
        """The session's best :data:`SEARCH_HITS` hits for ``query``."""
        try:
            page = await self.client.search(query, session_id=self.session_id, limit=SEARCH_HITS)
        except OMClientError as exc:
            return describe_error(exc)
        return search_text(query, page)

    async def recall(self, memory_id: str) -> str:
        """The memory ``memory_id`` and its source messages."""
        try:
            found = await self.client.recall(self.session_id, memory_id)
        except OMClientError as exc:
            return describe_error(exc)
        return recall_problem(found, self.session_id, memory_id) or recall_text(found)
