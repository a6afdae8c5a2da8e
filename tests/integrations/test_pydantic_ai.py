"""The pydantic-ai adapter against the embedded stack (``stack``: every message is observed on
a flush), with pydantic-ai's own test models and the real agent runtime.

``FunctionModel`` lets a test see exactly the messages the model received and answer from
them; ``TestModel`` calls the agent's tool, so tool calls and returns are recorded too.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from om_api.cli.stack import StackInfo
from om_api.client import AsyncOMClient
from om_api.integrations.pydantic_ai import CONTEXT_ORIGIN, ObservationalMemory

ROOT = Path(__file__).resolve().parents[2]
FACT = "our staging db is pg-staging-7 on port 6432"
QUESTION = "Which port is our staging db on?"
FILLER_RUNS = 3  # 4 messages each: more than the recent window (8), so the fact is in memory
OBSERVATION = re.compile(r"\[om:([a-f0-9]{12})\][^\n]*6432")


class Model:
    """A ``FunctionModel`` that keeps every message list it received and answers a question
    with the port found in them."""

    def __init__(self) -> None:
        self.received: list[list[ModelMessage]] = []
        self.model = FunctionModel(self.answer)

    def answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.received.append(messages)
        texts = [
            part.content
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, CompactionPart | UserPromptPart) and isinstance(part.content, str)
        ]
        if not texts[-1].endswith("?"):
            return ModelResponse(parts=[TextPart("Noted.")])
        port = re.search(r"port (\d+)", " ".join(texts[:-1]))
        return ModelResponse(parts=[TextPart(f"Port {port.group(1)}." if port else "unknown")])


def _memory_parts(messages: list[ModelMessage]) -> list[CompactionPart]:
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, CompactionPart)
        and (part.metadata or {}).get("origin") == CONTEXT_ORIGIN
    ]


def _user_prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def _tool_agent(memory: ObservationalMemory) -> Agent[None, str]:
    agent = Agent(TestModel(), capabilities=[memory.capability()])

    @agent.tool_plain
    def lookup_ticket(ticket: str) -> str:
        """Look a ticket up."""
        return f"ticket {ticket} is resolved"

    return agent


def test_example_answers_from_memory_in_a_new_run(stack: StackInfo) -> None:
    env = {**os.environ, "OM_API_URL": stack.api_url, "OM_API_KEY": stack.api_key}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "pydantic_ai_memory.py")],
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
    async def scenario() -> None:
        async with AsyncOMClient(stack.api_url, stack.api_key) as om:
            session = (await om.create_session()).id
            memory = ObservationalMemory(om, session)
            model = Model()
            agent = Agent(model.model, capabilities=[memory.capability()])
            told = await agent.run(FACT)
            recorded = await memory.record(told.new_messages())
            for n in range(FILLER_RUNS):
                filler = await _tool_agent(memory).run(f"Look up ticket {n}, please.")
                recorded_filler = await memory.record(filler.new_messages())
            await om.wait_for_job(recorded_filler.flush.job_id, timeout_s=60)

            # Run 1's messages are passed back as history: the processor must replace them.
            asked = await agent.run(QUESTION, message_history=told.all_messages())
            assert asked.output == "Port 6432."
            received = model.received[-1]
            assert _user_prompts(received) == [QUESTION]
            (part,) = _memory_parts(received)
            assert part.content is not None
            found = OBSERVATION.search(part.content)
            assert found is not None, part.content

            recalled = await om.recall(session, found.group(1))
            assert recalled.found
            sources = {s.id: s.message.content for s in recalled.sources if s.message}
            # The observation rests on run 1's user message (and the reply it drew).
            assert sources[recorded.append.appended_ids[0]] == FACT

    asyncio.run(scenario())


def test_recording_is_idempotent_and_keeps_tool_calls(stack: StackInfo) -> None:
    async def scenario() -> None:
        async with AsyncOMClient(stack.api_url, stack.api_key) as om:
            session = (await om.create_session()).id
            memory = ObservationalMemory(om, session)
            result = await _tool_agent(memory).run("Look up ticket 7, please.")
            first = await memory.record(result.new_messages())
            again = await memory.record(result.new_messages())
            # all_messages() holds this run's context request too: it is not conversation.
            whole = await memory.record(result.all_messages())
            assert len(first.append.appended_ids) == 4
            assert again.append.appended_ids == whole.append.appended_ids == []
            assert again.append.duplicate_ids == first.append.appended_ids
            assert whole.append.duplicate_ids == first.append.appended_ids

            page = await om.entries(session)
            messages = [e.message for e in page.entries if e.message]
            assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
            call = messages[1].tool_calls[0]
            assert (call.name, call.arguments) == ("lookup_ticket", {"ticket": "a"})
            assert (messages[2].tool_call_id, messages[2].content) == (
                call.id,
                "ticket a is resolved",
            )

    asyncio.run(scenario())


def test_a_resumed_run_keeps_the_tool_call_it_answers(stack: StackInfo) -> None:
    """Run 2 resumes a tool call that run 1 left for approval: the model must see the call
    before its result, though the rest of run 1 is replaced by memory."""
    received: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        received.append(messages)
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("Restarted.")])
        return ModelResponse(parts=[ToolCallPart("restart", {"service": "api"}, "call-1")])

    async def scenario() -> None:
        async with AsyncOMClient(stack.api_url, stack.api_key) as om:
            session = (await om.create_session()).id
            memory = ObservationalMemory(om, session)
            agent = Agent(
                FunctionModel(model),
                capabilities=[memory.capability()],
                output_type=[str, DeferredToolRequests],
            )

            @agent.tool_plain(requires_approval=True)
            def restart(service: str) -> str:
                """Restart a service."""
                return f"{service} restarted"

            asked = await agent.run("Restart the api service.")
            assert isinstance(asked.output, DeferredToolRequests)
            await memory.record(asked.new_messages())
            approved = DeferredToolResults(approvals={"call-1": True})
            resumed = await agent.run(
                message_history=asked.all_messages(), deferred_tool_results=approved
            )
            assert resumed.output == "Restarted."
            parts = [p for m in received[-1] for p in m.parts]
            kinds = [type(p) for p in parts if isinstance(p, ToolCallPart | ToolReturnPart)]
            assert kinds == [ToolCallPart, ToolReturnPart]
            assert not any(isinstance(p, UserPromptPart) for p in parts)  # memory stands for it

            await memory.record(resumed.new_messages())
            messages = [e.message for e in (await om.entries(session)).entries if e.message]
            assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
            assert messages[2].tool_call_id == messages[1].tool_calls[0].id == "call-1"

    asyncio.run(scenario())


def test_max_tokens_budgets_the_context_the_model_receives(stack: StackInfo) -> None:
    async def scenario() -> None:
        async with AsyncOMClient(stack.api_url, stack.api_key) as om:
            session = (await om.create_session()).id
            # Unobserved messages (no flush yet) far beyond a 256-token budget.
            lines = [f"Build {n} of the payments service passed all checks." for n in range(60)]
            await om.append(session, [{"role": "user", "content": line} for line in lines])

            texts = []
            for budget in (None, 256):
                model = Model()
                memory = ObservationalMemory(om, session, max_tokens=budget)
                await Agent(model.model, capabilities=[memory.capability()]).run("Status?")
                (part,) = _memory_parts(model.received[-1])
                assert part.content is not None
                texts.append(part.content)
            unbudgeted, budgeted = texts
            assert all(line in unbudgeted for line in lines)
            assert "not in memory yet and not shown here" not in unbudgeted
            assert "not in memory yet and not shown here" in budgeted
            assert lines[-1] in budgeted and lines[0] not in budgeted

    asyncio.run(scenario())


class MemoryToolModel:
    """A ``FunctionModel`` that searches memory for the question, recalls the memory of the
    hit that names a port, and answers with the port in what the recall returned."""

    def __init__(self) -> None:
        self.returned: list[ToolReturnPart] = []
        self.model = FunctionModel(self.answer)

    def answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert {tool.name for tool in info.function_tools} >= {"search_memory", "recall_memory"}
        last = messages[-1]
        returned = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if not returned:
            return ModelResponse(parts=[ToolCallPart("search_memory", {"query": QUESTION})])
        self.returned += returned
        result = returned[0]
        if result.tool_name == "search_memory":
            memory = OBSERVATION.search(str(result.content))
            assert memory is not None, result.content
            # An unknown id first: the tool answers it in text, and the run goes on.
            return ModelResponse(
                parts=[
                    ToolCallPart("recall_memory", {"memory_id": "om:000000000000"}, "unknown"),
                    ToolCallPart("recall_memory", {"memory_id": f"om:{memory.group(1)}"}, "found"),
                ]
            )
        port = re.search(r"port (\d+)", " ".join(str(p.content) for p in returned))
        return ModelResponse(parts=[TextPart(f"Port {port.group(1)}." if port else "unknown")])


def test_the_memory_tools_search_then_recall_the_exact_message(stack: StackInfo) -> None:
    async def scenario() -> None:
        async with AsyncOMClient(stack.api_url, stack.api_key) as om:
            session = (await om.create_session()).id
            fact = (await om.append(session, [{"role": "user", "content": FACT}])).appended_ids[0]
            await om.wait_for_job((await om.flush(session)).job_id, timeout_s=60)
            memory = ObservationalMemory(om, session)
            model = MemoryToolModel()
            agent = Agent(
                model.model, capabilities=[memory.capability()], toolsets=[memory.toolset()]
            )
            asked = await agent.run(QUESTION)
            assert asked.output == "Port 6432."
            searched, *recalled = model.returned
            assert f"[{fact}] message in session {session}: " in str(searched.content)
            unknown, found = sorted(recalled, key=lambda part: part.tool_call_id != "unknown")
            assert unknown.content == f"no memory om:000000000000 in session {session}"
            assert f"[{fact}] user: {FACT}" in str(found.content)

    asyncio.run(scenario())
