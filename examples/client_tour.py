"""The README's client tour, as printed there: an agent server's whole integration.

Start a stack with ``make up`` (or ``om up``), then run, with the key it printed::

    OM_API_URL=http://127.0.0.1:8000 OM_API_KEY=... .venv/bin/python examples/client_tour.py
"""

import os
import re
import uuid

from om_api.client import OMClient
from om_api.schemas import MessageWire

with OMClient(os.environ["OM_API_URL"], os.environ["OM_API_KEY"]) as om:
    session = om.create_session(f"tour-{uuid.uuid4().hex[:8]}").id
    # After an agent run: append its messages, ask for a flush.
    om.append(
        session,
        [
            MessageWire(role="user", content="Our staging db is pg-staging-7, port 6432."),
            MessageWire(role="assistant", content="Noted: pg-staging-7:6432."),
        ],
    )
    job = om.wait_for_job(om.flush(session).job_id, timeout_s=60)
    # Two short messages are below the observer's threshold (10,000 tokens): the job says
    # so, and the context's recent block shows them, so nothing is out of sight meanwhile.
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
    # force=True observes now, whatever the threshold (a host ending a session does this).
    job = om.wait_for_job(om.flush(session, force=True).job_id, timeout_s=60)
    print("flush:", job.state, job.counts)
    # Before the next turn: the two context blocks, as the agent's model reads them. Memory
    # covers what the recent block (the last 8 messages) no longer shows.
    memory, recent = om.context(session).blocks
    print(memory.text)
    print("---")
    print(recent.text)
    # Any [om:<id>] / [reflection:<id>] in the memory block recalls the raw messages behind it.
    memory_id = re.search(r"\[om:([a-f0-9]{12})\]", memory.text).group(1)
    recalled = om.recall(session, memory_id)
    print("recalled:", [s.message.content for s in recalled.sources if s.message])
