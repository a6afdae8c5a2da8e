"""The canary proof: a unique string in a child session's tool output, the child funnelled
into a workspace, both flushed (the extractive provider quotes what it observes). Before the
erasure the string is stored; after the erasure job it is in no file of the data folder
(database, WAL, logs), no row of any table, no Redis key or value, and not in the workspace's
context or recall, even after the workspace re-observes; an unrelated session's context is
byte for byte what it was. The whole embedded stack runs as processes (``om api``, ``om
worker``, private Redis), on SQLite and, with ``OM_TEST_DATABASE_URL``, PostgreSQL."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from om_api.cli.stack import Stack, StackConfig, StackInfo
from om_api.client import OMClient
from om_api.client.core import NotFound
from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import SessionEntry
from tests.conftest import BACKENDS, fresh_database
from tests.e2e.erasure_scan import files_holding, redis_holding, tables_holding
from tests.e2e.support import LOW

CANARY = f"canary-{uuid.uuid4().hex}"
WS = "workspace"
CHILD = "child"
OTHER = "unrelated"


@pytest.fixture(params=BACKENDS)
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[StackInfo, Path]]:
    data = tmp_path / "data"
    data.mkdir()
    with fresh_database(request.param, data) as url:
        config = StackConfig(
            database_url=url,
            api_port=0,
            beat=False,
            flower=False,
            env={"OM_SETTINGS_JSON": json.dumps(LOW), "OM_PROVIDER": "extractive"},
            log_dir=data / "logs",
        )
        with Stack(config) as running:
            yield running.info, data


def _flush(om: OMClient, session: str) -> None:
    for _ in range(10):
        job = om.wait_for_job(om.flush(session, force=True).job_id, timeout_s=120)
        assert job.state in ("succeeded", "skipped"), job.error
        if om.context(session).unobserved.messages == 0:
            return
    raise AssertionError(f"{session} still has unobserved messages")


def _memory_ids(om: OMClient, session: str) -> list[str]:
    page = om.entries(session, limit=1000)
    ledger = fold_ledger([SessionEntry.model_validate(e.model_dump()) for e in page.entries])
    return [o.id for o in ledger.observations] + [r.id for r in ledger.reflections]


def _shown(om: OMClient, session: str) -> str:
    """Everything the session shows an agent: its context and the recall of each memory id."""
    parts = [om.context(session).model_dump_json()]
    parts += [
        om.recall(session, memory_id).model_dump_json() for memory_id in _memory_ids(om, session)
    ]
    return "\n".join(parts)


def _user(entry_id: str, text: str) -> dict[str, object]:
    return {"id": entry_id, "kind": "message", "message": {"role": "user", "content": text}}


def test_an_erased_session_leaves_no_byte_behind(stack: tuple[StackInfo, Path]) -> None:
    info, data = stack
    with OMClient(info.api_url, info.api_key, timeout_s=60) as om:
        om.create_session(WS)
        om.append(WS, [_user("w1", "Supervisor: find out which port the billing service uses.")])
        om.create_session(CHILD, workspace=WS, metadata={"subject": "alice@example.com"})
        om.append(
            CHILD,
            [
                _user("c1", "Child: run the port lookup tool for billing."),
                {
                    "id": "c2",
                    "kind": "message",
                    "message": {
                        "role": "tool",
                        "content": f"lookup result: billing listens on 8443, token {CANARY}",
                        "tool_call_id": "call-1",
                    },
                },
            ],
        )
        om.append(WS, [_user("w2", "Supervisor: thanks, now check the invoice queue.")])
        om.create_session(OTHER)
        om.append(OTHER, [_user("o1", "A different agent plans a team offsite in May.")])
        for session in (CHILD, WS, OTHER):
            _flush(om, session)
        unrelated = om.context(OTHER).model_dump_json()

        client = redis.Redis.from_url(info.redis_url)
        assert CANARY in _shown(om, WS)
        # The workspace's own memory quotes it (not only the copy): the erasure must reach it.
        assert any(CANARY in om.recall(WS, m).model_dump_json() for m in _memory_ids(om, WS))
        assert "memory_items" in tables_holding(info.database_url, CANARY)
        if info.database_url.startswith("sqlite"):
            assert files_holding(data, CANARY)

        ticket = om.erase_session(CHILD)
        with pytest.raises(NotFound):
            om.get_session(CHILD)
        job = om.wait_for_job(ticket.job_id, timeout_s=120)
        assert job.state == "succeeded", job.error
        assert job.kind == "erasure" and job.counts["sessions"] == 1
        assert om.erase_session(CHILD).job_id == ticket.job_id  # asking again: the same job

        assert tables_holding(info.database_url, CANARY) == []
        assert redis_holding(client, CANARY) == []
        assert files_holding(data, CANARY) == []
        assert CANARY not in _shown(om, WS)
        # The workspace re-observes what lost its memory; still nothing of the child comes back.
        _flush(om, WS)
        assert CANARY not in _shown(om, WS)
        assert "invoice queue" in om.context(WS).model_dump_json()
        assert om.context(OTHER).model_dump_json() == unrelated
        assert files_holding(data, CANARY) == []
        client.close()
