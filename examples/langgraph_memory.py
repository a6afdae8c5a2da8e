"""A LangGraph agent with observational memory: a fact told in one run is known in the next.

Start a stack with ``make up`` (or ``om up``), then run, with the key it printed::

    OM_API_URL=http://127.0.0.1:8000 OM_API_KEY=... .venv/bin/python examples/langgraph_memory.py

Run 1 tells the agent a fact and a few more turns follow, so the fact leaves the recent
messages; a flush observes them. Run 2 starts from a fresh graph state: the model gets the
fact from the memory block only. The model is a LangChain fake chat model answering from
what it was sent, so no LLM key is needed; put a real one (``ChatOpenAI(model=...)``) in its
place and nothing else changes.
"""

from __future__ import annotations

import os
import re
import uuid
import warnings
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.prebuilt import create_react_agent
from langgraph.warnings import LangGraphDeprecatedSinceV10

from om_api.client import OMClient
from om_api.integrations.langgraph import ObservationalMemory

# create_react_agent is deprecated in favour of langchain.agents.create_agent, which lives in
# the langchain package that the langgraph extra does not install; the pre-model hook is the
# way the installed agent factory documents for replacing history.
warnings.filterwarnings("ignore", category=LangGraphDeprecatedSinceV10)

FACT = "Our staging db is pg-staging-7 on port 6432."
# More than the recent window (8 messages) after the fact, as in any long session.
LATER = [
    "Alice is on call this week.",
    "The deploy window is Tuesday at 14:00.",
    "Logs are in Loki, dashboards in Grafana.",
    "Staging is reset every Sunday night.",
]
QUESTION = "Which port is our staging db on?"


class AnswersFromWhatItReceived(BaseChatModel):
    """A stand-in for an LLM: a question is answered with a port found in what the model was
    sent (memory included); anything else is acknowledged. It prints the memory it gets."""

    @property
    def _llm_type(self) -> str:
        return "answers-from-what-it-received"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        texts = [m.text for m in messages if isinstance(m, SystemMessage | HumanMessage)]
        if not texts or not texts[-1].endswith("?"):
            reply = "Noted."
        else:
            for message in messages:
                if isinstance(message, SystemMessage):
                    print("memory the model received:", message.text, sep="\n")
            port = re.search(r"port (\d+)", " ".join(texts[:-1]))
            reply = f"Port {port.group(1)}." if port else "I don't know."
        return ChatResult(generations=[ChatGeneration(message=AIMessage(reply))])


def main() -> None:
    with OMClient(os.environ["OM_API_URL"], os.environ["OM_API_KEY"]) as om:
        session = om.create_session(f"langgraph-{uuid.uuid4().hex[:8]}").id
        memory = ObservationalMemory(om, session, max_tokens=8_000)
        agent = create_react_agent(
            AnswersFromWhatItReceived(), [], pre_model_hook=memory.pre_model_hook
        )

        for text in [FACT, *LATER]:
            told = agent.invoke({"messages": [HumanMessage(text)]})
            memory.record(told["messages"])  # appends, and asks for a flush
        # Each record asked for a flush; force=True observes now, whatever the threshold.
        om.wait_for_job(om.flush(session, force=True).job_id, timeout_s=60)

        # A new run from a fresh state: all it knows of run 1 comes from memory.
        asked = agent.invoke({"messages": [HumanMessage(QUESTION)]})
        print("answer:", asked["messages"][-1].text)


if __name__ == "__main__":
    main()
