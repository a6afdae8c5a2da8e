"""A LangGraph agent with observational memory: a fact told in one run is known in the next.

Against a running stack (``make up``) and any OpenAI-compatible Chat Completions server::

    OM_API_URL=http://127.0.0.1:8000 OM_API_KEY=... OPENAI_API_KEY=... \\
        .venv/bin/python examples/langgraph_memory.py

``OPENAI_BASE_URL`` picks another server, ``OPENAI_MODEL`` the model (``gpt-4o-mini``).
Run 1 tells the agent a fact and a few more turns follow, so the fact leaves the recent
messages; a flush observes them. Run 2 starts from a fresh graph state: the model gets the
fact from the memory block only. The model is LangChain's own ``ChatOpenAI``, driven by
LangGraph's ``create_react_agent``; what it receives is printed before each answer of run 2.
"""

from __future__ import annotations

import os
import uuid
import warnings
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from langgraph.warnings import LangGraphDeprecatedSinceV10

from om_api.client import OMClient
from om_api.integrations.langgraph import ObservationalMemory

# create_react_agent is deprecated in favour of langchain.agents.create_agent, which lives in
# the langchain package that the langgraph extra does not install; the pre-model hook is the
# way the installed agent factory documents for replacing history.
warnings.filterwarnings("ignore", category=LangGraphDeprecatedSinceV10)

FACT = "Please note: our staging db is pg-staging-7 on port 6432."
# More than the recent window (8 messages) after the fact, as in any long session.
LATER = [
    "Alice is on call this week.",
    "The deploy window is Tuesday at 14:00.",
    "Logs are in Loki, dashboards in Grafana.",
    "Staging is reset every Sunday night.",
]
QUESTION = "Which port does our staging db listen on?"


class ShowInput(BaseCallbackHandler):
    """Prints what the chat model receives: the memory message, then the current turn."""

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        for message in messages[0]:
            print(f"model received [{message.type}]:", message.text)


def make_model() -> ChatOpenAI:
    # OPENAI_API_KEY and OPENAI_BASE_URL come from the environment (read by the openai SDK).
    # Chat Completions, not the Responses API: what every OpenAI-compatible server speaks.
    return ChatOpenAI(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), use_responses_api=False)


def main() -> None:
    with OMClient(os.environ["OM_API_URL"], os.environ["OM_API_KEY"]) as om:
        session = om.create_session(f"langgraph-{uuid.uuid4().hex[:8]}").id
        memory = ObservationalMemory(om, session, max_tokens=8_000)
        agent = create_react_agent(make_model(), [], pre_model_hook=memory.pre_model_hook)

        for text in [FACT, *LATER]:
            told = agent.invoke({"messages": [HumanMessage(text)]})
            print(f"run 1: {text!r} -> {told['messages'][-1].text!r}")
            memory.record(told["messages"])  # appends, and asks for a flush
        # Each record asked for a flush; force=True observes now, whatever the threshold.
        job = om.wait_for_job(om.flush(session, force=True).job_id, timeout_s=120)
        print("flush:", job.state, job.counts)

        # A new run from a fresh state: all it knows of run 1 comes from memory.
        asked = agent.invoke({"messages": [HumanMessage(QUESTION)]}, {"callbacks": [ShowInput()]})
        print("run 2 answer:", asked["messages"][-1].text)


if __name__ == "__main__":
    main()
