"""The README's client tour: an agent server's whole integration, against a running stack.

Start one with ``make up`` (or ``om up``), then run, with the key it printed::

    OM_API_URL=http://127.0.0.1:8000 OM_API_KEY=... .venv/bin/python examples/client_tour.py

The stack's defaults observe after 10,000 tokens; ``force=True`` asks for a pass now.
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
        runs = [
            ("Our staging database is pg-staging-7, port 6432.", "Noted: pg-staging-7:6432."),
            *[(f"Deploy build {n} to staging, please.", f"Build {n} is live on staging.")
              for n in range(101, 106)],
        ]  # fmt: skip
        for question, answer in runs:
            # After each agent run: append its messages, ask for a flush.
            om.append(
                session,
                [
                    MessageWire(role="user", content=question),
                    MessageWire(role="assistant", content=answer),
                ],
            )
            job = om.wait_for_job(om.flush(session, force=True).job_id, timeout_s=60)
        print("flush:", job.state)
        # Before the next turn: the two context blocks.
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
