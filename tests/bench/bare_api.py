"""The baseline of the agent-turns benchmark: a bare FastAPI app with the three routes an agent
server calls each turn, parsing the same request bodies with the same schemas and answering
the same response models, with no store, no Redis and no authentication.

Serve it under uvicorn: ``uvicorn --factory tests.bench.bare_api:create_app``.
"""

from __future__ import annotations

import secrets

from fastapi import FastAPI

from om_api.schemas import (
    AppendEntriesRequest,
    AppendEntriesResponse,
    ContextBlockOut,
    ContextOut,
    FlushRequest,
    FlushTicket,
    UnobservedOut,
)

RECENT_TEXT = "\n".join(
    f"[user] Deploy build {n} to staging, please.\n[assistant] Build {n} is live on staging."
    for n in range(8)
)
"""A recent block about the size the service answers early in a session."""


def create_app() -> FastAPI:
    """The bare app: ``GET .../context``, ``POST .../entries``, ``POST .../flush``."""
    app = FastAPI(title="bare")
    context = ContextOut(
        blocks=[
            ContextBlockOut(id="observational-memory", text=""),
            ContextBlockOut(id="recent-messages", text=RECENT_TEXT, entry_ids=["e"] * 16),
        ],
        unobserved=UnobservedOut(messages=16, tokens=400, first_id="e"),
        max_tokens=32_000,
    )

    @app.get("/v1/sessions/{session_id}/context", response_model=ContextOut)
    def read_context(session_id: str) -> ContextOut:
        return context

    @app.post(
        "/v1/sessions/{session_id}/entries", status_code=201, response_model=AppendEntriesResponse
    )
    def append(session_id: str, body: AppendEntriesRequest) -> AppendEntriesResponse:
        ids = [entry.id or secrets.token_hex(8) for entry in body.entries]
        return AppendEntriesResponse(appended_ids=ids, duplicate_ids=[], leaf_id=ids[-1])

    @app.post("/v1/sessions/{session_id}/flush", status_code=202, response_model=FlushTicket)
    def flush(session_id: str, body: FlushRequest | None = None) -> FlushTicket:
        return FlushTicket(job_id=secrets.token_hex(8), coalesced=True)

    return app
