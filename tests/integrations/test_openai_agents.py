"""The OpenAI Agents SDK adapter against the embedded stack (``stack``: every message is
observed on a flush) and a local Chat Completions server (:mod:`.openai_server`): the SDK's
``Agent``/``Runner`` run for real and talk HTTP to both, so a test sees exactly what the
model received.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    TResponseInputItem,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import Session
from openai import AsyncOpenAI

from om_api.cli.stack import StackInfo
from om_api.client import AsyncOMClient
from om_api.integrations.openai_agents import OMSession, RewindError
from tests.integrations import memory_tool_model
from tests.integrations.openai_server import ChatServer, last_user_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "openai_agents_memory.py"
FACT = "Please note: our staging db is pg-staging-7 on port 6432."
OBSERVATION = re.compile(r"\[om:([a-f0-9]{12})\][^\n]*6432")


def port_reply(request: dict[str, Any]) -> str:
    """Answers a question with the port when "6432" is anywhere in what the model received,
    and acknowledges anything else."""
    if not last_user_text(request).endswith("?"):
        return "Noted."
    return "Port 6432." if "6432" in json.dumps(request["messages"]) else "I don't know."


def say(role: str, text: str) -> TResponseInputItem:
    return cast(TResponseInputItem, {"role": role, "content": text})


def chatter(turns: int) -> list[TResponseInputItem]:
    """``turns`` user/assistant pairs: 2 messages each."""
    return [
        say(r, f"{r} chatter {n} about lunch.") for n in range(turns) for r in ("user", "assistant")
    ]


def new_id() -> str:
    return f"oa-test-{uuid.uuid4().hex[:12]}"


async def message_entries(om: AsyncOMClient, session_id: str) -> list[str]:
    page = await om.entries(session_id, limit=1000)
    return [e.id for e in page.entries if e.kind == "message"]


async def flushed(om: AsyncOMClient, session_id: str) -> None:
    job = await om.wait_for_job((await om.flush(session_id, force=True)).job_id, timeout_s=60)
    assert job.state == "succeeded", job


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    set_tracing_disabled(True)  # nothing may leave the machine


def test_example_recalls_the_fact_from_memory_in_run_2(stack: StackInfo) -> None:
    with ChatServer(port_reply) as server:
        env = {
            **os.environ,
            "OM_API_URL": stack.api_url,
            "OM_API_KEY": stack.api_key,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "test",
            "OPENAI_MODEL": "test-model",
        }
        done = subprocess.run(
            [sys.executable, str(EXAMPLE)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert "run 2 answer: Port 6432." in done.stdout, done.stdout
    assert "model received [system]: # Observational memory" in done.stdout, done.stdout

    # The last request is run 2's question: the fact is in the memory item only, not in any
    # message the SDK replayed (run 1's turns that told it are out of the recent window).
    asked = server.requests[-1].body["messages"]
    assert asked[-1] == {"role": "user", "content": "Which port does our staging db listen on?"}
    memory = [m["content"] for m in asked if m["role"] == "system" and "6432" in m["content"]]
    assert len(memory) == 1 and OBSERVATION.search(memory[0]), asked
    assert "pg-staging-7" in memory[0]
    conversation = [m for m in asked if m["role"] != "system"]
    assert conversation and not any("6432" in json.dumps(m) for m in conversation), asked


def test_get_items_starts_with_memory_holding_a_recallable_observation(stack: StackInfo) -> None:
    async def scenario() -> None:
        async with AsyncOMClient(stack.api_url, stack.api_key) as om:
            session = OMSession(om, new_id())
            assert isinstance(session, Session)
            assert await session.get_items() == []  # unknown to the service yet
            await session.add_items([say("user", FACT), say("assistant", "Noted.")])
            later = chatter(4)  # 8 messages: the recent window's floor
            await session.add_items(later)
            await flushed(om, session.session_id)

            items = await session.get_items()
            first = cast(dict[str, Any], items[0])
            assert first["role"] == "system"
            found = OBSERVATION.search(first["content"])
            assert found is not None, first["content"]
            # The rest are the recent messages, exactly as the SDK handed them over.
            assert items[1:] == later
            assert await session.get_items(limit=3) == later[-3:]
            assert await session.get_items(limit=len(items)) == items

            recalled = await om.recall(session.session_id, found.group(1))
            assert recalled.found
            # The observation rests on the fact's message (its first content part is the text).
            texts = [s.model_dump()["message"]["content"][0]["text"] for s in recalled.sources]
            assert FACT in texts

    asyncio.run(scenario())


def test_tool_calls_round_trip_into_the_next_runs_request(stack: StackInfo) -> None:
    @function_tool
    def db_port(name: str) -> str:
        """The port of a database."""
        return "6432"

    arguments = json.dumps({"name": "pg-staging-7"})
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "db_port", "arguments": arguments},
    }
    # Run 1: the tool call, then the answer from its output; run 2: an acknowledgement.
    replies: Iterator[str | dict[str, Any]] = iter(
        [{"tool_calls": [call]}, "It is 6432.", "Noted."]
    )

    async def scenario(server: ChatServer) -> None:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test")
        model = OpenAIChatCompletionsModel(model="test-model", openai_client=client)
        async with AsyncOMClient(stack.api_url, stack.api_key) as om:
            session = OMSession(om, new_id())
            agent = Agent(name="ops", model=model, tools=[db_port])
            await Runner.run(agent, "Which port has pg-staging-7?", session=session)
            await Runner.run(Agent(name="ops", model=model), "Thanks.", session=session)
            stored = (await om.entries(session.session_id)).entries
            roles = [e.message.role for e in stored if e.message]
            assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
            tool = next(e.message for e in stored if e.message and e.message.role == "tool")
            assert (tool.tool_call_id, tool.tool_name) == ("call_1", "db_port")

        # Run 2's request replays the call and its output as Chat Completions messages.
        sent = server.requests[-1].body["messages"]
        assert sent[-3]["role"] == "tool" and sent[-3]["content"] == "6432"
        assert sent[-4]["tool_calls"][0]["function"]["name"] == "db_port"

    with ChatServer(lambda request: next(replies)) as server:
        asyncio.run(scenario(server))


def test_add_items_is_idempotent_on_retry(stack: StackInfo) -> None:
    async def scenario() -> None:
        async with AsyncOMClient(stack.api_url, stack.api_key) as om:
            session = OMSession(om, new_id())
            turn = [say("user", "Deploy build 7."), say("assistant", "Build 7 is live.")]
            await session.add_items(turn[:1])  # as if the batch's append had stopped halfway
            await session.add_items(turn)
            await session.add_items(turn)
            # Another process (a fresh session object) retrying the same batch.
            await OMSession(om, session.session_id).add_items(turn)
            stored = await message_entries(om, session.session_id)
            assert len(stored) == 2
            assert await session.get_items() == turn

            # The same words later in the conversation are a new message.
            await session.add_items(turn[:1])
            assert len(await message_entries(om, session.session_id)) == 3
            assert await session.get_items() == [*turn, turn[0]]

    asyncio.run(scenario())


def test_pop_item_leaves_the_newest_message_off_and_revokes_it(stack: StackInfo) -> None:
    async def scenario() -> None:
        async with AsyncOMClient(stack.api_url, stack.api_key) as om:
            session = OMSession(om, new_id())
            assert await session.pop_item() is None
            wrong = say("assistant", "The staging db is on port 9999.")
            await session.add_items([say("user", "Where is staging?"), wrong])
            await flushed(om, session.session_id)
            wrong_id = (await message_entries(om, session.session_id))[-1]

            assert await session.pop_item() == wrong
            assert await session.get_items() == [say("user", "Where is staging?")]
            # Revoked: the tombstone exists already, so revoking again withholds nothing new.
            again = await om.revoke_entries(session.session_id, [wrong_id])
            assert again.tombstoned_ids == []
            await flushed(om, session.session_id)
            view = await om.view(session.session_id, full=True)
            assert "9999" not in view.text

            # Adding it back (as the SDK does after a failed rewind) stores it anew.
            await session.add_items([wrong])
            assert (await session.get_items())[-1] == wrong
            assert (await message_entries(om, session.session_id))[-1] != wrong_id

    asyncio.run(scenario())


def test_clear_session_starts_afresh(stack: StackInfo) -> None:
    async def scenario() -> None:
        async with AsyncOMClient(stack.api_url, stack.api_key) as om:
            session = OMSession(om, new_id())
            await session.clear_session()  # unknown session: nothing to do
            await session.add_items([say("user", FACT), *chatter(4)])
            await flushed(om, session.session_id)
            assert "6432" in json.dumps(await session.get_items())

            await session.clear_session()
            assert await session.get_items() == []
            assert await message_entries(om, session.session_id) == []
            status = await om.status(session.session_id)
            assert status.visible_observations == 0
            await flushed(om, session.session_id)
            assert await session.get_items() == []

            await session.add_items([say("user", "Fresh start.")])
            assert await session.get_items() == [say("user", "Fresh start.")]

    asyncio.run(scenario())


def test_a_session_begun_by_another_client_cannot_be_rewound_past_its_start(
    stack: StackInfo,
) -> None:
    async def scenario() -> None:
        async with AsyncOMClient(stack.api_url, stack.api_key) as om:
            session_id = (await om.create_session(new_id())).id
            await om.append(session_id, [{"role": "user", "content": "Hello from elsewhere."}])
            session = OMSession(om, session_id)
            # Another client's message comes back as plain text.
            assert await session.get_items() == [say("user", "Hello from elsewhere.")]
            with pytest.raises(RewindError):
                await session.pop_item()
            with pytest.raises(RewindError):
                await session.clear_session()
            assert len(await message_entries(om, session_id)) == 1

    asyncio.run(scenario())


def test_the_memory_tools_search_then_recall_the_exact_message(stack: StackInfo) -> None:
    question = "Which port is our staging db on?"

    async def scenario(server: ChatServer) -> None:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test")
        model = OpenAIChatCompletionsModel(model="test-model", openai_client=client)
        async with AsyncOMClient(stack.api_url, stack.api_key) as om:
            session = OMSession(om, new_id())
            await session.add_items([say("user", FACT)])
            (fact,) = await message_entries(om, session.session_id)
            await flushed(om, session.session_id)
            agent = Agent(name="ops", model=model, tools=session.tools())
            result = await Runner.run(agent, question, session=session)
            assert result.final_output == "Port 6432."
            offered = [t["function"]["name"] for t in server.requests[-1].body["tools"]]
            assert offered == ["search_memory", "recall_memory"]
            results = memory_tool_model.tool_results(server.requests[-1].body)
            searched = f"[{fact}] message in session {session.session_id}: "
            assert searched in results["call-search"]
            unknown = f"no memory {memory_tool_model.UNKNOWN_ID} in session {session.session_id}"
            assert results["call-unknown"] == unknown
            assert f"[{fact}] user: {FACT}" in results["call-found"]

    with ChatServer(memory_tool_model.reply) as server:
        asyncio.run(scenario(server))
