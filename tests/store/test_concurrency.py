"""Two real processes appending to one session end with one chain and no lost entry."""

from __future__ import annotations

import itertools
import multiprocessing

from appender import append_many

from om_workers.store import SqlStore

PER_PROCESS = 60


def test_two_processes_append_one_consistent_chain(
    store: SqlStore, tenant: str, session_id: str, migrated_url: str
) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    workers = [
        context.Process(
            target=append_many,
            args=(migrated_url, tenant, session_id, prefix, PER_PROCESS, start),
        )
        for prefix in ("p", "q")
    ]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0

    branch = store.read_branch(tenant, session_id)
    expected = {f"{p}{i}" for p in "pq" for i in range(PER_PROCESS)}
    assert {e.id for e in branch} == expected
    assert len(branch) == 2 * PER_PROCESS
    # One chain: every entry hangs off the one before it, and each process kept its order.
    assert branch[0].parent_id is None
    assert all(b.parent_id == a.id for a, b in itertools.pairwise(branch))
    for prefix in "pq":
        mine = [int(e.id[1:]) for e in branch if e.id[0] == prefix]
        assert mine == sorted(mine)
    info = store.get_session(tenant, session_id)
    assert (info.entry_count, info.leaf_id) == (2 * PER_PROCESS, branch[-1].id)
