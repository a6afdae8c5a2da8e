"""The README's client tour: an agent server's whole integration, against a running stack.

Start one with ``make up`` (or ``om up``), then run, with the key it printed::

    OM_API_URL=http://127.0.0.1:8000 OM_API_KEY=... .venv/bin/python examples/client_tour.py

The stack's defaults observe after 10,000 tokens; until then the context's recent block
shows every message memory does not cover yet. ``force=True`` observes now.
"""

from __future__ import annotations

import os
import re
import uuid

from om_api.client import OMClient
from om_api.schemas import MessageWire


def main() -> None:
    with OMClient(os.environ["OM_API_URL"], os.environ["OM_API_KEY"]) as om:
        session = om.create_session(f"tour-{uuid.uuid4().hex[:8]}").id
        print("session:", session)
        # After an agent run: append its messages, ask for a flush.
        om.append(
            session,
            [
                MessageWire(role="user", content="Our staging db is pg-staging-7, port 6432."),
                MessageWire(role="assistant", content="Noted: pg-staging-7:6432."),
            ],
        )
        job = om.wait_for_job(om.flush(session).job_id, timeout_s=60)
        # Two short messages are below the observer's threshold: the job says so, and the
        # context shows them in the recent block, so nothing is out of sight meanwhile.
        print("flush:", job.state, "-", job.reason)
        context = om.context(session)
        print("not yet in memory:", context.unobserved.messages, "messages")
        print(context.blocks[1].text)
        for n in range(101, 107):
            om.append(
                session,
                [
                    MessageWire(role="user", content=f"Deploy build {n} to staging, please."),
                    MessageWire(role="assistant", content=f"Build {n} is live on staging."),
                ],
            )
        # force=True observes now, whatever the threshold.
        job = om.wait_for_job(om.flush(session, force=True).job_id, timeout_s=60)
        print("flush:", job.state, job.counts)
        # Before the next turn: the two context blocks, as the agent's model reads them.
        memory, recent = om.context(session).blocks
        print(memory.text)
        print(recent.text)
        # Any memory id shown in the memory block recalls the raw messages behind it.
        memory_id = re.search(r"\[(?:om|reflection):([a-f0-9]{12})\]", memory.text)
        if memory_id:
            recalled = om.recall(session, memory_id.group(1))
            print("recalled:", [s.message.content for s in recalled.sources if s.message])


if __name__ == "__main__":
    main()
