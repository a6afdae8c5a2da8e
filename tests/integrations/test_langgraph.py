"""The LangGraph adapter against the embedded stack (``stack``: every message is observed on a
flush), with the real LangGraph runtime (``create_react_agent``, a checkpointer, a tool node).

The model is a LangChain chat model in the framework's fake-model style: a small
``BaseChatModel`` that keeps the messages it received and answers from them (it calls the
ticket tool when asked to look a ticket up).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent
from pydantic import Field

from om_api.cli.stack import StackInfo
from om_api.client import OMClient
from om_api.integrations.langgraph import MEMORY_PREAMBLE, ObservationalMemory

# create_react_agent is deprecated for langchain.agents.create_agent (not installed here).
pytestmark = pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")

ROOT = Path(__file__).resolve().parents[2]
FACT = "our staging db is pg-staging-7 on port 6432"
QUESTION = "Which port is our staging db on?"
FILLER_RUNS = 3  # 4 messages each: more than the recent window (8), so the fact is in memory
OBSERVATION = re.compile(r"\[om:([a-f0-9]{12})\][^\n]*6432")
LOOK_UP = re.compile(r"Look up ticket (\d+)")


class Model(BaseChatModel):
    """Keeps every message list it received; calls ``lookup_ticket`` when asked to look a
    ticket up, reports the tool's result, answers a question with a port found in what it was
    sent, and acknowledges anything else."""

    received: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "answers-from-what-it-received"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        # The answers do not depend on the tool schemas, so there is nothing to bind.
        return cast("Runnable[LanguageModelInput, AIMessage]", self)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.received.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(f"Done: {last.text}")
        ticket = LOOK_UP.search(last.text)
        if ticket:
            call = {"name": "lookup_ticket", "args": {"ticket": ticket.group(1)}, "id": "call-1"}
            return AIMessage("", tool_calls=[call])
        if not last.text.endswith("?"):
            return AIMessage("Noted.")
        sent = " ".join(
            m.text for m in messages[:-1] if isinstance(m, SystemMessage | HumanMessage)
        )
        port = re.search(r"port (\d+)", sent)
        return AIMessage(f"Port {port.group(1)}." if port else "unknown")


@tool
def lookup_ticket(ticket: str) -> str:
    """Look a ticket up."""
    return f"ticket {ticket} is resolved"


def _memory_texts(messages: list[BaseMessage]) -> list[str]:
    return [m.text for m in messages if isinstance(m, SystemMessage) and MEMORY_PREAMBLE in m.text]


def _thread() -> RunnableConfig:
    return {"configurable": {"thread_id": uuid.uuid4().hex}}


def test_example_answers_from_memory_in_a_new_run(stack: StackInfo) -> None:
    env = {**os.environ, "OM_API_URL": stack.api_url, "OM_API_KEY": stack.api_key}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "langgraph_memory.py")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "answer: Port 6432." in done.stdout
    # The new run got the fact from memory (the later turns pushed it out of the recent block).
    assert OBSERVATION.search(done.stdout.split("## Recent messages")[0]), done.stdout


def test_run_2_gets_memory_with_a_recallable_id_instead_of_old_history(stack: StackInfo) -> None:
    with OMClient(stack.api_url, stack.api_key) as om:
        session = om.create_session().id
        memory = ObservationalMemory(om, session)
        model = Model()
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
        received = model.received[-1]
        assert [m.text for m in received if isinstance(m, HumanMessage)] == [QUESTION]
        (memory_text,) = _memory_texts(received)
        found = OBSERVATION.search(memory_text)
        assert found is not None, memory_text

        recalled = om.recall(session, found.group(1))
        assert recalled.found
        sources = {s.id: s.message.content for s in recalled.sources if s.message}
        # The observation rests on run 1's user message (and the reply it drew).
        assert sources[recorded.append.appended_ids[0]] == FACT


def test_recording_is_idempotent_and_keeps_tool_calls(stack: StackInfo) -> None:
    with OMClient(stack.api_url, stack.api_key) as om:
        session = om.create_session().id
        memory = ObservationalMemory(om, session)
        agent = create_react_agent(Model(), [lookup_ticket], pre_model_hook=memory.pre_model_hook)
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

        with pytest.raises(ValueError, match="no id"):
            memory.record([HumanMessage("a message that never went through the graph")])


def test_max_tokens_budgets_the_context_the_model_receives(stack: StackInfo) -> None:
    with OMClient(stack.api_url, stack.api_key) as om:
        session = om.create_session().id
        # Unobserved messages (no flush yet) far beyond a 256-token budget.
        lines = [f"Build {n} of the payments service passed all checks." for n in range(60)]
        om.append(session, [{"role": "user", "content": line} for line in lines])

        texts = []
        for budget in (None, 256):
            model = Model()
            memory = ObservationalMemory(om, session, max_tokens=budget)
            agent = create_react_agent(model, [], pre_model_hook=memory.pre_model_hook)
            agent.invoke({"messages": [HumanMessage("Status?")]})
            (text,) = _memory_texts(model.received[-1])
            texts.append(text)
        unbudgeted, budgeted = texts
        assert all(line in unbudgeted for line in lines)
        assert "not in memory yet and not shown here" not in unbudgeted
        assert "not in memory yet and not shown here" in budgeted
        assert lines[-1] in budgeted and lines[0] not in budgeted
