"""A pydantic-ai agent with observational memory: a fact told in one run is known in the next.

Start a stack with ``make up`` (or ``om up``), then run, with the key it printed::

    OM_API_URL=http://127.0.0.1:8000 OM_API_KEY=... .venv/bin/python examples/pydantic_ai_memory.py

Run 1 tells the agent a fact and a few more turns follow, so the fact leaves the recent
messages; a flush observes them. Run 2 is a new run with no message history: the model gets
the fact from the memory block only. The model is pydantic-ai's own ``FunctionModel``
answering from what it was sent, so no LLM key is needed; put a real model
(``"openai:gpt-5.2"``) in its place and nothing else changes.
"""

from __future__ import annotations

import asyncio
import os
import re
import uuid

from pydantic_ai import Agent
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from om_api.client import AsyncOMClient
from om_api.integrations.pydantic_ai import ObservationalMemory

FACT = "Our staging db is pg-staging-7 on port 6432."
# More than the recent window (8 messages) after the fact, as in any long session.
LATER = [
    "Alice is on call this week.",
    "The deploy window is Tuesday at 14:00.",
    "Logs are in Loki, dashboards in Grafana.",
    "Staging is reset every Sunday night.",
]
QUESTION = "Which port is our staging db on?"


def answer_from_what_it_received(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A stand-in for an LLM: a question is answered with a port found in what the model was
    sent (memory included); anything else is acknowledged."""
    texts = [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, CompactionPart | UserPromptPart) and isinstance(part.content, str)
    ]
    if not texts or not texts[-1].endswith("?"):
        return ModelResponse(parts=[TextPart("Noted.")])
    port = re.search(r"port (\d+)", " ".join(texts[:-1]))
    return ModelResponse(parts=[TextPart(f"Port {port.group(1)}." if port else "I don't know.")])


async def main() -> None:
    async with AsyncOMClient(os.environ["OM_API_URL"], os.environ["OM_API_KEY"]) as om:
        session = (await om.create_session(f"pydantic-ai-{uuid.uuid4().hex[:8]}")).id
        memory = ObservationalMemory(om, session, max_tokens=8_000)
        agent = Agent(
            FunctionModel(answer_from_what_it_received), capabilities=[memory.capability()]
        )

        for text in [FACT, *LATER]:
            told = await agent.run(text)
            await memory.record(told.new_messages())  # appends, and asks for a flush
        # Each record asked for a flush; force=True observes now, whatever the threshold.
        await om.wait_for_job((await om.flush(session, force=True)).job_id, timeout_s=60)

        asked = await agent.run(QUESTION)  # a new run: no message_history
        for message in asked.all_messages():  # the history as the model received it
            for part in message.parts:
                if isinstance(part, CompactionPart):
                    print("memory the model received:", part.content, sep="\n")
        print("answer:", asked.output)


if __name__ == "__main__":
    asyncio.run(main())
