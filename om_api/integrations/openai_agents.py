"""An OpenAI Agents SDK ``Session`` backed by the om service (``pip install
'.[openai-agents]'`` in a checkout, ``'observational-memory-service[openai-agents]'`` from the
package index)::

    session = OMSession(AsyncOMClient(url, key), "support-42")
    agent = Agent(name="support", tools=[*tools, *session.tools()])
    result = await Runner.run(agent, "What port does staging use?", session=session)

The history the SDK reads is the service's context: a leading ``system`` item holding the
memory block (observations and reflections with their ``[om:...]`` ids), then every message
memory does not cover yet and the last few. Each SDK item is stored as one message entry:
a role and text for the observer, plus the item itself in a data part, so the SDK gets back
exactly what it stored (other clients' messages come back as plain text items).
:meth:`OMSession.tools` gives the agent ``search_memory`` and ``recall_memory``
(:mod:`~om_api.integrations.memory_tools`), to find a detail memory does not show and read the
exact messages behind a memory id.

Nothing is ever deleted. :meth:`OMSession.pop_item` and :meth:`OMSession.clear_session`
fork the session's entry tree (an ``openai-agents.fork`` entry beside what they remove, so
the current branch no longer holds it) and revoke the removed messages, so memory derived
from them is withheld, even memory a flush that was already running writes later.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any, cast

from agents import FunctionTool, function_tool
from agents.items import TResponseInputItem

from om_api.client import AsyncOMClient, Conflict, NotFound, OMClientError
from om_api.integrations.memory_tools import AsyncMemoryTools
from om_api.schemas import (
    MAX_ENTRIES_PAGE,
    MAX_MESSAGES_PAGE,
    MAX_REVOCATION_IDS,
    ContentPartWire,
    EntryIn,
    EntryOut,
    MessageWire,
    ToolCallWire,
)
from om_core.errors import ConflictError

if TYPE_CHECKING:  # only named in annotations: SDKs before SessionSettings import this too
    from agents.memory import SessionSettings

__all__ = ["OMSession", "RewindError"]

log = logging.getLogger(__name__)

ITEM_PART = "openai-agents.item"  # content part holding the SDK item (no text: models skip it)
ROOT_KIND = "openai-agents.root"  # first entry of a session the adapter starts: clear forks here
FORK_KIND = "openai-agents.fork"  # moves the branch past popped or cleared messages


class RewindError(OMClientError, ConflictError):
    """``pop_item``/``clear_session`` cannot leave a message out: it is the session's first
    entry (another client wrote it before this adapter started the session), or another
    writer moved the branch meanwhile (read again and retry)."""


class OMSession:
    """The SDK's ``Session`` protocol over an :class:`AsyncOMClient` (the caller owns and
    closes the client). ``max_tokens`` is the context budget (the server's default when
    ``None``); ``session_settings`` is the SDK's (its ``limit`` reaches :meth:`get_items`).

    Every method raises the client's errors (:class:`~om_api.client.Unavailable` when the
    service stays unreachable through the client's retries, and so on).
    """

    def __init__(
        self,
        client: AsyncOMClient,
        session_id: str,
        *,
        max_tokens: int | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self._client = client
        self._max_tokens = max_tokens
        self._started = False

    def tools(self) -> list[FunctionTool]:
        """``search_memory`` and ``recall_memory`` on this session, for ``Agent(tools=[...])``:
        each answers in text, an API failure included (one line, so a missing detail never
        ends the run)."""
        return [
            function_tool(
                tool.function, name_override=tool.name, description_override=tool.description
            )
            for tool in AsyncMemoryTools(self._client, self.session_id).named()
        ]

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The memory item (when memory is not empty), then the recent messages as items;
        with ``limit``, the newest ``limit`` of those (the memory item stands for everything
        older, so it goes first). Empty for a session the service does not know."""
        memory, shown = await self._recent()
        items: list[TResponseInputItem] = []
        if memory.strip():
            items.append(cast(TResponseInputItem, {"role": "system", "content": memory}))
        if shown:
            _, entries = await self._entries_from(shown, len(shown))
            wanted = set(shown)
            items += [_item_of(e) for e in entries if e.id in wanted]
        return items if limit is None else items[max(0, len(items) - limit) :]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items as messages (creating the session on first use) and request a
        flush without waiting (a failed request is only logged: the service's reconciler
        flushes later anyway). :class:`~om_api.client.InvalidRequest` for unstorable text.

        An entry's id hashes the conversation entry before it and its item, so adding the same
        items again (a retry, from any process) appends nothing, and after a partial append
        only the rest. Hence items identical to the newest stored ones, after the same
        predecessor, count as stored (as when a failed run is retried with the same input).
        """
        if not items:
            return
        await self._start()
        _, shown = await self._recent()
        before, entries = await self._entries_from(shown, len(items))
        chain = [before] if before else []
        chain += [e.id for e in entries if e.kind in ("message", ROOT_KIND, FORK_KIND)]
        # The newest conversation entries these items' ids reproduce are stored already (all
        # of them: a retry); the rest go after the newest entry.
        stored, ids = 0, self._ids(chain[-1] if chain else "", items)
        for count in range(min(len(items), len(chain)), 0, -1):
            candidate = self._ids(chain[-count - 1] if len(chain) > count else "", items)
            if candidate[:count] == chain[-count:]:
                stored, ids = count, candidate
                break
        if stored == len(items):
            return
        plain = [_plain(item) for item in items]
        # Tool outputs carry only the call id; their tool's name comes from the call.
        names = {i["call_id"]: i["name"] for i in plain if i.get("type") == "function_call"}
        fresh = [
            EntryIn(id=i, kind="message", message=_message(item, names))
            for i, item in zip(ids[stored:], plain[stored:], strict=True)
        ]
        await self._client.append(self.session_id, fresh)
        try:
            await self._client.flush(self.session_id)
        except OMClientError as exc:
            log.warning("flush request for %s failed: %s", self.session_id, exc)

    async def pop_item(self) -> TResponseInputItem | None:
        """Leave the newest message off the branch and revoke it; return it as an item
        (``None`` when there is no message). The memory item is never popped.

        Everything after that message on the branch goes with it: memory records a flush
        wrote after it, so the messages they covered show verbatim again until the next
        flush observes them anew. :class:`RewindError` when the message is the session's
        first entry. When the revocation fails the message is already off the branch.
        """
        _, shown = await self._recent()
        if not shown:
            return None
        _, entries = await self._entries_from(shown, 1)
        newest = next((e for e in entries if e.id == shown[-1]), None)
        if newest is None:
            raise RewindError(f"the branch of {self.session_id} moved while popping")
        if newest.parent_id is None:
            raise RewindError(f"message {newest.id} is the first entry of {self.session_id}")
        await self._fork(newest.parent_id, [newest.id])
        return _item_of(newest)

    async def clear_session(self) -> None:
        """Start afresh: fork the branch at its first entry (the adapter's root entry) and
        revoke every message of the old branch, so history and memory are empty. Reads the
        whole branch; a no-op for an unknown or empty session. :class:`RewindError` when the
        first entry is a message (the session was not started by this adapter)."""
        try:
            _, entries = await self._entries_from([], 0)
        except NotFound:
            return
        if entries and entries[0].kind == "message":
            raise RewindError(f"{self.session_id} begins with message {entries[0].id}")
        messages = [e.id for e in entries if e.kind == "message"]
        if messages:
            await self._fork(entries[0].id, messages)

    # Internals -----------------------------------------------------------------------------

    async def _start(self) -> None:
        """Create the session if needed and give an empty one its root entry (once)."""
        if self._started:
            return
        try:
            info = await self._client.get_session(self.session_id)
        except NotFound:
            try:
                info = await self._client.create_session(self.session_id)
            except Conflict:  # created meanwhile by another process
                info = await self._client.get_session(self.session_id)
        if info.entry_count == 0:
            root = EntryIn(id=f"oa-root-{self._digest('root')}", kind=ROOT_KIND)
            await self._client.append(self.session_id, [root])
        self._started = True

    async def _recent(self) -> tuple[str, list[str]]:
        """The memory block's text and the recent block's message ids, oldest first (empty
        for a session the service does not know)."""
        try:
            context = await self._client.context(self.session_id, max_tokens=self._max_tokens)
        except NotFound:
            return "", []
        memory, recent = context.blocks  # always both, memory first
        return memory.text, recent.entry_ids or []

    async def _entries_from(
        self, shown: list[str], count: int
    ) -> tuple[str | None, list[EntryOut]]:
        """The message before the newest ``count`` messages (``None``: there is none) and
        every branch entry after it. ``shown`` is the context's recent message ids, a suffix
        of the branch's messages; older ones are paged backward from its oldest."""
        before: str | None = None
        if count < len(shown):
            before = shown[-count - 1]
        elif shown:
            need = count - len(shown) + 1
            older = await self._client.messages(
                self.session_id, shown[0], limit=min(need, MAX_MESSAGES_PAGE), direction="backward"
            )
            # Fewer than needed: the branch starts within reach, so read it from its root.
            before = older.items[0].entry_id if len(older.items) == need else None
        entries: list[EntryOut] = []
        cursor = before
        while True:
            page = await self._client.entries(self.session_id, cursor, MAX_ENTRIES_PAGE)
            entries += page.entries
            if page.next_cursor is None:
                return before, entries
            cursor = page.next_cursor

    async def _fork(self, parent_id: str, revoked: list[str]) -> None:
        """Move the branch to a new entry under ``parent_id`` (what came after it is left off)
        and revoke ``revoked``: a flush still running may append memory from them to the new
        branch, and the revocation withholds it."""
        fork_id = f"oa-fork-{uuid.uuid4().hex}"  # random: every fork is a new event
        data = {"revoked": len(revoked)}  # for a reader of the stored tree
        fork = EntryIn(id=fork_id, parent_id=parent_id, kind=FORK_KIND, data=data)
        await self._client.append(self.session_id, [fork])
        for i in range(0, len(revoked), MAX_REVOCATION_IDS):
            await self._client.revoke_entries(self.session_id, revoked[i : i + MAX_REVOCATION_IDS])

    def _ids(self, previous: str, items: list[TResponseInputItem]) -> list[str]:
        """Entry ids for ``items`` appended after conversation entry ``previous``: each hashes
        the one before it and its item (the session id too: entry ids are per tenant)."""
        ids: list[str] = []
        for item in items:
            previous = f"oa-{self._digest(previous, json.dumps(_plain(item), sort_keys=True))}"
            ids.append(previous)
        return ids

    def _digest(self, *parts: str) -> str:
        return hashlib.sha256("\n".join((self.session_id, *parts)).encode()).hexdigest()[:40]


def _plain(item: TResponseInputItem) -> dict[str, Any]:
    """The item as plain JSON (the SDK's items are JSON already; anything else as text)."""
    return cast(dict[str, Any], json.loads(json.dumps(item, default=str)))


def _text(value: Any) -> str:
    """A string, or the ``text`` (or ``refusal``) of a list of parts; else ``""``."""
    if isinstance(value, str):
        return value
    parts = [p.get("text") or p.get("refusal") for p in value or [] if isinstance(p, dict)]
    return "\n".join(p for p in parts if isinstance(p, str))


def _arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as an object: the SDK's JSON string parsed, anything else kept."""
    try:
        parsed = json.loads(raw)
    except (TypeError, ValueError):
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": raw}


def _message(item: dict[str, Any], tool_names: dict[str, str]) -> MessageWire:
    """The message an SDK item is stored as. Assistant messages, function calls and other
    items (reasoning, hosted tool calls: text naming their type) are ``assistant``; tool
    outputs ``tool``; user, system and developer messages ``user``, since the observer only
    reads user, assistant and tool messages (the item part keeps the real role)."""
    kind, role = item.get("type", "message"), item.get("role")
    text = _text(item.get("content") or item.get("output") or item.get("summary"))
    fields: dict[str, Any] = {"role": "assistant"}  # what an assistant message keeps
    if kind == "message" and role == "user":
        fields["role"] = "user"
    elif kind == "message" and role != "assistant":
        fields["role"], text = "user", f"[{role}] {text}"
    elif kind == "function_call":
        arguments = _arguments(item.get("arguments"))
        fields["tool_calls"] = [
            ToolCallWire(id=item["call_id"], name=item["name"], arguments=arguments)
        ]
    elif kind.endswith("_output"):
        call = item.get("call_id")
        fields.update(role="tool", tool_call_id=call, tool_name=tool_names.get(call or ""))
    elif kind != "message":
        text = f"[{kind}] {text}".rstrip()
    parts = [ContentPartWire(type="text", text=text)] if text else []
    return MessageWire(content=[*parts, ContentPartWire(type=ITEM_PART, data=item)], **fields)


def _item_of(entry: EntryOut) -> TResponseInputItem:
    """The SDK item a message entry holds; another client's message as a text message (user
    for user messages, assistant for the rest, tool calls and results written out)."""
    message = entry.message
    assert message is not None  # callers pass message entries only
    if isinstance(message.content, str):
        text = message.content
    else:
        held = [p.data for p in message.content if p.type == ITEM_PART and p.data is not None]
        if held:
            return cast(TResponseInputItem, held[0])
        text = "\n".join(p.text for p in message.content if p.text is not None)
    if message.role == "tool":
        text = f"[tool {message.tool_name or ''} result] {text}"
    text += "".join(f"\n(called {c.name} {json.dumps(c.arguments)})" for c in message.tool_calls)
    role = "user" if message.role == "user" else "assistant"
    return cast(TResponseInputItem, {"role": role, "content": text})
