"""Crash safety of the funnel: a real ``om api`` process is killed (SIGKILL) during a burst of
appends from three linked children. The copies are written in the original's transaction, so
after the crash every stored child message has exactly one copy on the workspace and every
copy has its original; retrying every batch on a restarted API then stores each message and
its copy exactly once. On SQLite and, with ``OM_TEST_DATABASE_URL``, PostgreSQL."""

from __future__ import annotations

import itertools
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from om_core.ledger.funnel import funnel_origin
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import AccountStore, SqlStore
from tests.api.processes import start_api
from tests.threads import CheckedThread

CHILDREN = ("c1", "c2", "c3")
WS = "ws"
KILL_AFTER_ACKS = 90


def _start_api(database_url: str, redis_url: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    # The burst measures the funnel, not the limiter.
    return start_api(database_url, redis_url, log, OM_RATE_LIMITS_ENABLED="false")


def _message(entry_id: str, role: str, text: str) -> dict[str, object]:
    return {"id": entry_id, "kind": "message", "message": {"role": role, "content": text}}


def _batch(child: str, index: int) -> list[dict[str, object]]:
    # A user message, an assistant answer, and a note that is never copied.
    return [
        _message(f"{child}-u{index}", "user", f"step {index}"),
        _message(f"{child}-a{index}", "assistant", f"did {index}"),
        {"id": f"{child}-n{index}", "kind": "custom", "data": {"type": "note", "n": index}},
    ]


def _check_one_copy_each(store: SqlStore, tenant: str) -> int:
    """Every stored child message has exactly one copy, and every copy has its original;
    returns how many child messages are stored."""
    originals = {
        (child, e.id)
        for child in CHILDREN
        for e in store.read_branch(tenant, child)
        if e.kind == "message"
    }
    copies = Counter()
    for entry in store.read_branch(tenant, WS):
        origin = funnel_origin(entry)
        assert origin is not None
        copies[(origin.session_id, origin.entry_id)] += 1
    assert set(copies) == originals
    assert set(copies.values()) <= {1}
    return len(originals)


def test_sigkill_during_a_burst_leaves_no_message_without_its_copy(
    migrated_url: str, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    store = SqlStore.from_url(migrated_url)
    accounts = AccountStore(store.engine)
    tenant = accounts.create_tenant("acme").id
    key = accounts.create_api_key(tenant).plaintext
    store.create_session(tenant, WS)
    for child in CHILDREN:
        store.create_session(tenant, child, workspace=WS)
    headers = {"Authorization": f"Bearer {key}"}
    log = tmp_path / "api.log"

    process, url = _start_api(migrated_url, redis_server.url, log)
    acked = 0
    lock = threading.Lock()
    sent: dict[str, int] = {child: 0 for child in CHILDREN}

    def burst(child: str) -> None:
        nonlocal acked
        with httpx.Client(base_url=url, headers=headers, timeout=10) as client:
            for index in range(100_000):
                sent[child] = index + 1
                try:
                    answer = client.post(
                        f"/v1/sessions/{child}/entries", json={"entries": _batch(child, index)}
                    )
                except httpx.HTTPError:
                    return  # the API died under this request
                assert answer.status_code == 201, answer.text
                with lock:
                    acked += 1

    threads = [CheckedThread(burst, child) for child in CHILDREN]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 120
        while acked < KILL_AFTER_ACKS:
            for thread in threads:
                thread.raise_failure()  # a refused append fails the test now
            assert time.monotonic() < deadline and process.poll() is None, log.read_text()
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    finally:
        for thread in threads:
            thread.join(60)
    assert process.returncode == -signal.SIGKILL

    stored = _check_one_copy_each(store, tenant)
    assert stored >= 2 * acked
    # Some batches were in flight when the process died: sent, never answered.
    assert sum(sent.values()) > acked

    # Restart, and retry every batch each child sent (the host does not know which of the
    # last ones committed): each message and its copy are stored exactly once.
    process, url = _start_api(migrated_url, redis_server.url, log)
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            for child in CHILDREN:
                for index in range(sent[child]):
                    answer = client.post(
                        f"/v1/sessions/{child}/entries", json={"entries": _batch(child, index)}
                    )
                    assert answer.status_code == 201, answer.text
    finally:
        process.terminate()
        process.wait(30)
    assert _check_one_copy_each(store, tenant) == 2 * sum(sent.values())
    branch = store.read_branch(tenant, WS)
    assert store.get_session(tenant, WS).entry_count == len(branch)
    assert all(b.parent_id == a.id for a, b in itertools.pairwise(branch))
    store.close()
