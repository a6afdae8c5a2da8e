"""The LangGraph adapter against the embedded stack (``stack``: every message is observed on a
flush), with the real LangGraph runtime (``create_react_agent``, a checkpointer, a tool node)
and LangChain's own ``ChatOpenAI`` talking HTTP to a local Chat Completions server
(:mod:`.openai_server`), so a test sees exactly what the model was sent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent

from om_api.cli.stack import StackInfo
from om_api.client import OMClient
from om_api.integrations.langgraph import MEMORY_PREAMBLE, ObservationalMemory
from tests.integrations import memory_tool_model
from tests.integrations.openai_server import ChatServer, last_user_text

# create_react_agent is deprecated for langchain.agents.create_agent (not installed here).
pytestmark = pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")

ROOT = Path(__file__).resolve().parents[2]
FACT = "our staging db is pg-staging-7 on port 6432"
QUESTION = "Which port is our staging db on?"
FILLER_RUNS = 3  # 4 messages each: more than the recent window (8), so the fact is in memory
OBSERVATION = re.compile(r"\[om:([a-f0-9]{12})\][^\n]*6432")
LOOK_UP = re.compile(r"Look up ticket (\d+)")


def reply(request: dict[str, Any]) -> str | dict[str, Any]:
    """The scripted model: reports a tool's result, calls ``lookup_ticket`` when asked to look
    a ticket up, answers a question with the port when "6432" is anywhere in what it was sent
    before the question, and acknowledges anything else."""
    messages = request["messages"]
    if messages[-1]["role"] == "tool":
        return f"Done: {messages[-1]['content']}"
    text = last_user_text(request)
    ticket = LOOK_UP.search(text)
    if ticket:
        arguments = json.dumps({"ticket": ticket.group(1)})
        call = {"name": "lookup_ticket", "arguments": arguments}
        return {"tool_calls": [{"id": "call-1", "type": "function", "function": call}]}
    if not text.endswith("?"):
        return "Noted."
    return "Port 6432." if "6432" in json.dumps(messages[:-1]) else "I don't know."


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer(reply) as running:
        yield running


@pytest.fixture
def model(server: ChatServer) -> ChatOpenAI:
    return ChatOpenAI(
        model=server.model, base_url=server.base_url, api_key="test", use_responses_api=False
    )


@tool
def lookup_ticket(ticket: str) -> str:
    """Look a ticket up."""
    return f"ticket {ticket} is resolved"


def _sent(server: ChatServer) -> list[dict[str, Any]]:
    """The messages of the last request the model got, as sent over the wire."""
    return list(server.requests[-1].body["messages"])


def _memory_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [
        m["content"] for m in messages if m["role"] == "system" and MEMORY_PREAMBLE in m["content"]
    ]


def _thread() -> RunnableConfig:
    return {"configurable": {"thread_id": uuid.uuid4().hex}}


def test_example_answers_from_memory_in_a_new_run(stack: StackInfo, server: ChatServer) -> None:
    env = {
        **os.environ,
        "OM_API_URL": stack.api_url,
        "OM_API_KEY": stack.api_key,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test",
        "OPENAI_MODEL": server.model,
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "langgraph_memory.py")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "run 2 answer: Port 6432." in done.stdout, done.stdout
    assert f"model received [system]: {MEMORY_PREAMBLE}" in done.stdout, done.stdout

    # The last request is run 2's question: the fact is in the memory message only, not in
    # any message of the conversation (the later turns pushed it out of the recent block).
    asked = _sent(server)
    assert asked[-1] == {"role": "user", "content": "Which port does our staging db listen on?"}
    (memory,) = _memory_texts(asked)
    assert OBSERVATION.search(memory.split("## Recent messages")[0]), memory
    assert "pg-staging-7" in memory
    conversation = [m for m in asked if m["role"] != "system"]
    assert not any("6432" in json.dumps(m) for m in conversation), asked


def test_run_2_gets_memory_with_a_recallable_id_instead_of_old_history(
    stack: StackInfo, server: ChatServer, model: ChatOpenAI
) -> None:
    with OMClient(stack.api_url, stack.api_key) as om:
        session = om.create_session().id
        memory = ObservationalMemory(om, session)
        # A checkpointer keeps the thread's messages in the state: run 2 starts with all of
        # run 1's, and the hook must send memory in their place.
        agent = create_react_agent(
            model,
            [lookup_ticket],
            pre_model_hook=memory.pre_model_hook,
            checkpointer=InMemorySaver(),
        )
        thread = _thread()
        state = agent.invoke({"messages": [HumanMessage(FACT)]}, thread)
        recorded = memory.record(state["messages"])
        for n in range(FILLER_RUNS):
            state = agent.invoke(
                {"messages": [HumanMessage(f"Look up ticket {n}, please.")]}, thread
            )
            # The whole thread each time: what was recorded before comes back as duplicates.
            recorded_filler = memory.record(state["messages"])
            assert len(recorded_filler.append.appended_ids) == 4
        om.wait_for_job(recorded_filler.flush.job_id, timeout_s=60)

        state = agent.invoke({"messages": [HumanMessage(QUESTION)]}, thread)
        assert state["messages"][-1].text == "Port 6432."
        assert state["messages"][0].text == FACT  # the state itself is left as it was
        sent = _sent(server)
        # The framework sent the tool's schema with the request, and of the thread's user
        # messages only the question: run 1's turns reach the model through memory alone.
        assert [t["function"]["name"] for t in server.requests[-1].body["tools"]] == [
            "lookup_ticket"
        ]
        assert [m["content"] for m in sent if m["role"] == "user"] == [QUESTION]
        assert not any(m["role"] in ("assistant", "tool") for m in sent), sent
        (memory_text,) = _memory_texts(sent)
        found = OBSERVATION.search(memory_text)
        assert found is not None, memory_text

        recalled = om.recall(session, found.group(1))
        assert recalled.found
        sources = {s.id: s.message.content for s in recalled.sources if s.message}
        # The observation rests on run 1's user message (and the reply it drew).
        assert sources[recorded.append.appended_ids[0]] == FACT


def test_recording_is_idempotent_and_keeps_tool_calls(
    stack: StackInfo, server: ChatServer, model: ChatOpenAI
) -> None:
    with OMClient(stack.api_url, stack.api_key) as om:
        session = om.create_session().id
        memory = ObservationalMemory(om, session)
        agent = create_react_agent(model, [lookup_ticket], pre_model_hook=memory.pre_model_hook)
        state = agent.invoke({"messages": [HumanMessage("Look up ticket 7, please.")]})
        first = memory.record(state["messages"])
        again = memory.record(state["messages"])
        assert len(first.append.appended_ids) == 4
        assert again.append.appended_ids == []
        assert again.append.duplicate_ids == first.append.appended_ids

        messages = [e.message for e in om.entries(session).entries if e.message]
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
        call = messages[1].tool_calls[0]
        assert (call.id, call.name, call.arguments) == ("call-1", "lookup_ticket", {"ticket": "7"})
        assert (messages[2].tool_call_id, messages[2].content) == ("call-1", "ticket 7 is resolved")
        assert messages[3].content == "Done: ticket 7 is resolved"
        # Within the turn the tool loop's own messages go to the model as they are.
        assert [m["role"] for m in _sent(server)][-3:] == ["user", "assistant", "tool"]

        with pytest.raises(ValueError, match="no id"):
            memory.record([HumanMessage("a message that never went through the graph")])


def test_max_tokens_budgets_the_context_the_model_receives(
    stack: StackInfo, server: ChatServer, model: ChatOpenAI
) -> None:
    with OMClient(stack.api_url, stack.api_key) as om:
        session = om.create_session().id
        # Unobserved messages (no flush yet) far beyond a 256-token budget.
        lines = [f"Build {n} of the payments service passed all checks." for n in range(60)]
        om.append(session, [{"role": "user", "content": line} for line in lines])

        texts = []
        for budget in (None, 256):
            memory = ObservationalMemory(om, session, max_tokens=budget)
            agent = create_react_agent(model, [], pre_model_hook=memory.pre_model_hook)
            agent.invoke({"messages": [HumanMessage("Status?")]})
            (text,) = _memory_texts(_sent(server))
            texts.append(text)
        unbudgeted, budgeted = texts
        assert all(line in unbudgeted for line in lines)
        assert "not in memory yet and not shown here" not in unbudgeted
        assert "not in memory yet and not shown here" in budgeted
        assert lines[-1] in budgeted and lines[0] not in budgeted


def test_the_memory_tools_search_then_recall_the_exact_message(stack: StackInfo) -> None:
    with (
        ChatServer(memory_tool_model.reply) as tool_server,
        OMClient(stack.api_url, stack.api_key) as om,
    ):
        session = om.create_session().id
        fact = om.append(session, [{"role": "user", "content": FACT}]).appended_ids[0]
        om.wait_for_job(om.flush(session).job_id, timeout_s=60)
        memory = ObservationalMemory(om, session)
        model = ChatOpenAI(
            model=tool_server.model,
            base_url=tool_server.base_url,
            api_key="test",
            use_responses_api=False,
        )
        agent = create_react_agent(model, memory.tools(), pre_model_hook=memory.pre_model_hook)
        state = agent.invoke({"messages": [HumanMessage(QUESTION)]})
        assert state["messages"][-1].text == "Port 6432."
        offered = [t["function"]["name"] for t in tool_server.requests[-1].body["tools"]]
        assert offered == ["search_memory", "recall_memory"]
        results = memory_tool_model.tool_results(tool_server.requests[-1].body)
        assert f"[{fact}] message in session {session}: " in results["call-search"]
        unknown = f"no memory {memory_tool_model.UNKNOWN_ID} in session {session}"
        assert results["call-unknown"] == unknown
        assert f"[{fact}] user: {FACT}" in results["call-found"]
