"""An OpenAI Agents SDK agent whose session is om: it remembers a fact across runs.

Against a running stack (``make up``) and any OpenAI-compatible Chat Completions server::

    OM_API_URL=http://127.0.0.1:8000 OM_API_KEY=... OPENAI_API_KEY=... \\
        .venv/bin/python examples/openai_agents_memory.py

``OPENAI_BASE_URL`` picks another server, ``OPENAI_MODEL`` the model (``gpt-4o-mini``).
Run 1 tells the agent a fact and a few more turns follow, so the fact leaves the recent
messages; a flush observes them. Run 2, with a new agent and a new session object, asks for
the fact: the model gets it from the memory block only.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    RunHooks,
    Runner,
    TResponseInputItem,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from om_api.client import AsyncOMClient
from om_api.integrations.openai_agents import OMSession

FACT = "Please note: our staging db is pg-staging-7 on port 6432."
# More than the recent window (8 messages) after the fact, as in any long session.
LATER = [
    "Alice is on call this week.",
    "The deploy window is Tuesday at 14:00.",
    "Logs are in Loki, dashboards in Grafana.",
    "Staging is reset every Sunday night.",
]
QUESTION = "Which port does our staging db listen on?"


class ShowInput(RunHooks[Any]):
    """Prints what the model receives: the memory item, then the recent messages."""

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        for item in input_items:
            content: Any = item.get("content")
            if isinstance(content, list):  # the SDK's own assistant items: output_text parts
                content = " ".join(part.get("text", "") for part in content)
            print(f"model received [{item.get('role', item.get('type'))}]:", content)


def make_agent() -> Agent[Any]:
    model = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
    client = AsyncOpenAI()  # OPENAI_API_KEY and OPENAI_BASE_URL from the environment
    return Agent(
        name="ops",
        instructions="You are a concise ops assistant.",
        model=OpenAIChatCompletionsModel(model=model, openai_client=client),
    )


async def main() -> None:
    set_tracing_disabled(True)  # traces would go to OpenAI's platform
    session_id = f"agents-demo-{uuid.uuid4().hex[:8]}"
    async with AsyncOMClient(os.environ["OM_API_URL"], os.environ["OM_API_KEY"]) as om:
        session = OMSession(om, session_id)
        agent = make_agent()
        for text in [FACT, *LATER]:
            result = await Runner.run(agent, text, session=session)
            print(f"run 1: {text!r} -> {result.final_output!r}")
        # Each turn requested a flush; force=True observes now, whatever the threshold.
        job = await om.wait_for_job((await om.flush(session_id, force=True)).job_id, 120)
        print("flush:", job.state, job.counts)

        later = OMSession(om, session_id)
        result = await Runner.run(make_agent(), QUESTION, session=later, hooks=ShowInput())
        print("run 2 answer:", result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
