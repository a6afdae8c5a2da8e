"""A delegation tree end to end: a parent (workspace) session and three child sessions linked to
it append concurrently through the real API (the embedded stack: ``om api`` and ``om worker``
processes, private Redis, SQLite, the extractive provider observing every message), with
flushes of children and parent while they work. Afterwards the parent's memory holds
observations citing a copy of every child's observable message, exactly once each, on one
unforked branch, and recalling one returns the child's original text and its origin."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from om_api.cli import app
from om_api.cli.stack import Stack, StackConfig, StackInfo
from om_api.client import OMClient
from om_api.schemas import EntryOut
from om_core.ledger.fold import fold_ledger
from om_core.ledger.funnel import ORIGIN_KEY
from om_core.ledger.models import SessionEntry
from tests.e2e.support import LOW

CHILDREN = ("researcher", "coder", "tester")
TURNS = 12
PARENT = "supervisor"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    root = tmp_path_factory.mktemp("funnel")
    config = StackConfig(
        database_url=f"sqlite:///{root / 'om.db'}",
        api_port=0,
        flower_port=0,
        beat=False,
        flower=False,
        env={"OM_SETTINGS_JSON": json.dumps(LOW), "OM_PROVIDER": "extractive"},
        log_dir=root / "logs",
    )
    with Stack(config) as running:
        yield running.info


def _turn(child: str, index: int) -> list[dict[str, object]]:
    return [
        {
            "id": f"{child}-u{index}",
            "kind": "message",
            "message": {
                "role": "user",
                "content": f"Task {index} for {child}: inspect module_{index}.py now.",
            },
        },
        {
            "id": f"{child}-a{index}",
            "kind": "message",
            "message": {
                "role": "assistant",
                "content": f"{child.capitalize()} found 4{index} lines in module_{index}.py "
                f"and fixed bug #{index}.",
            },
        },
    ]


def _branch(om: OMClient, session: str) -> list[EntryOut]:
    entries: list[EntryOut] = []
    after: str | None = None
    while True:
        page = om.entries(session, after=after, limit=1000)
        entries.extend(page.entries)
        if page.next_cursor is None:
            return entries
        after = page.next_cursor


def _flush_until_observed(om: OMClient, session: str) -> None:
    for _ in range(20):
        job = om.wait_for_job(om.flush(session, force=True).job_id, timeout_s=120)
        assert job.state in ("succeeded", "skipped"), job.error
        if om.context(session).unobserved.messages == 0:
            return
    raise AssertionError(f"{session} still has unobserved messages")


def test_parent_memory_observes_every_child_message_once(stack: StackInfo) -> None:
    with OMClient(stack.api_url, stack.api_key, timeout_s=60) as om:
        om.create_session(PARENT)
        om.append(
            PARENT,
            [
                {
                    "kind": "message",
                    "message": {
                        "role": "user",
                        "content": "Delegate the release checks to three helpers.",
                    },
                }
            ],
        )
        for child in CHILDREN:
            assert om.create_session(child, workspace=PARENT).workspace == PARENT

        start = threading.Barrier(len(CHILDREN))
        errors: list[BaseException] = []

        def work(child: str) -> None:
            try:
                with OMClient(stack.api_url, stack.api_key, timeout_s=60) as mine:
                    start.wait()
                    for index in range(TURNS):
                        mine.append(child, _turn(child, index))
                        if index % 4 == 3:
                            # Flushes of the child and of the shared parent, while the others
                            # keep appending: the child's records stay on the child, and the
                            # parent's memory writes interleave with the copies.
                            mine.flush(child, force=True)
                            mine.flush(PARENT, force=True)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(child,)) for child in CHILDREN]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert errors == []
        _flush_until_observed(om, PARENT)
        _flush_until_observed(om, CHILDREN[0])

        parent = _branch(om, PARENT)
        # One unforked branch: each entry hangs off the one before it, and the branch is
        # every entry the parent session holds.
        assert parent[0].parent_id is None
        assert all(b.parent_id == a.id for a, b in itertools.pairwise(parent))
        assert om.get_session(PARENT).entry_count == len(parent)

        originals = {
            (child, e.id): e
            for child in CHILDREN
            for e in _branch(om, child)
            if e.kind == "message"
        }
        assert len(originals) == len(CHILDREN) * TURNS * 2
        copies = [e for e in parent if e.data and ORIGIN_KEY in e.data]
        origins = [(e.data[ORIGIN_KEY]["sessionId"], e.data[ORIGIN_KEY]["entryId"]) for e in copies]  # type: ignore[index]
        assert sorted(origins) == sorted(originals)  # every child message, exactly once
        for copy, origin in zip(copies, origins, strict=True):
            assert copy.message == originals[origin].message
        # No child memory record travelled: every record on the parent cites parent entries.
        parent_ids = {e.id for e in parent}
        ledger = fold_ledger([SessionEntry.model_validate(e.model_dump()) for e in parent])
        cited = {s for o in ledger.observations for s in o.source_entry_ids}
        assert cited <= parent_ids
        assert {c.id for c in copies} <= cited  # the parent's memory observed every copy
        # The child's own memory is on the child, with ids the parent never minted.
        child_ledger = fold_ledger(
            [SessionEntry.model_validate(e.model_dump()) for e in _branch(om, CHILDREN[0])]
        )
        assert child_ledger.observations
        assert not {o.id for o in child_ledger.observations} & {o.id for o in ledger.observations}

        # Recall on the parent: the child's original text, and where it came from.
        wanted = next(c for c, o in zip(copies, origins, strict=True) if o == ("coder", "coder-a5"))
        observation = next(o for o in ledger.observations if wanted.id in o.source_entry_ids)
        recalled = om.recall(PARENT, observation.id)
        assert recalled.found
        source = next(s for s in recalled.sources if s.id == wanted.id)
        assert source.message is not None
        assert source.message.content == originals[("coder", "coder-a5")].message.content  # type: ignore[union-attr]
        assert source.data == {ORIGIN_KEY: {"sessionId": "coder", "entryId": "coder-a5"}}
        # ``om recall`` says where each source came from.
        shown = CliRunner().invoke(
            app,
            ["recall", PARENT, observation.id, "--api", stack.api_url, "--key", stack.api_key],
            env={"COLUMNS": "200", "NO_COLOR": "1"},
        )
        assert shown.exit_code == 0, shown.output
        assert "coder/coder-a5" in shown.stdout
        # And the parent's context shows memory minted from the children's work.
        memory = om.context(PARENT).blocks[0]
        assert memory.id == "observational-memory"
        assert all(child.capitalize() in memory.text for child in CHILDREN)
