"""21. Web console page load: each console page of a 100,000-entry session over HTTP (a live
API in this process, SQLite store), p99 of many loads, against the API route that reads the
same data (``GET .../context`` for the session page, ``GET .../entries`` for the branch page,
``GET .../memory/{id}`` for the recall page) in the same run."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import httpx

from om_workers.config import Settings
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import AccountStore, SqlStore, upgrade
from tests.api.server import Published, serve

from .common import Section, percentile
from .synthetic import branch

SIZE = 100_000
BATCH = 1_000
LOADS = 200
COLD_LOADS = 50
"""Loads of the cold session page (each after an append): fewer, each rebuilds a context."""
SESSION = "s100k"
FORM_TOKEN = re.compile(r'name="form_token" value="([^"]+)"')


def _fill(store: SqlStore, tenant: str) -> list[str]:
    store.create_session(tenant, SESSION)
    rows = branch(SIZE, SESSION)
    for start in range(0, SIZE, BATCH):
        store.append_entries(tenant, SESSION, rows[start : start + BATCH])
    return [row.id for row in rows]


def _p99(load: Callable[[], httpx.Response], loads: int = LOADS) -> float:
    """p99 of ``loads`` loads, ms: the time httpx measured for the page's own request
    (from sending it to reading its answer), not what ``load`` did to prepare it."""
    times = []
    for _ in range(loads):
        answer = load()
        answer.raise_for_status()
        times.append(answer.elapsed.total_seconds())
    return percentile(times, 0.99) * 1000


def _sign_in(browser: httpx.Client, key: str) -> None:
    form = browser.get("/console/login")
    token = FORM_TOKEN.search(form.text)
    assert token is not None
    answer = browser.post("/console/login", data={"credential": key, "form_token": token.group(1)})
    assert answer.status_code == 303, answer.text


def run() -> Section:
    section = Section("21. Web console page load (100,000-entry session, SQLite store)")
    with tempfile.TemporaryDirectory() as folder, EmbeddedRedis() as redis_server:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        upgrade(url)
        store = SqlStore.from_url(url)
        accounts = AccountStore(store.engine)
        tenant = accounts.create_tenant("bench").id
        key = accounts.create_api_key(tenant).plaintext
        ids = _fill(store, tenant)
        memory_id = store.read_context_state(tenant, SESSION).ledger.observations[-1].id
        client = connect(redis_server.url)
        settings = Settings(database_url=url, redis_url=redis_server.url, log_level="WARNING")
        with (
            serve(settings, store, client, Published()) as api,
            httpx.Client(base_url=api.url, timeout=120) as browser,
            httpx.Client(
                base_url=api.url, headers={"Authorization": f"Bearer {key}"}, timeout=120
            ) as http,
        ):
            _sign_in(browser, key)
            _measure(section, browser, http, tenant, ids, memory_id)
        client.close()
        store.close()
    section.notes.append(
        f"p99 of {LOADS} sequential loads of each page, timed in the client over HTTP on "
        "localhost (so an upper bound of the server's time), signed in with an API key "
        "(each load checks the sign-in in Redis and the key in the store, and spends the key's "
        "rate limit, as an API request does). The session holds 100,000 entries with an "
        "observations record every 50 (10,000 observations). Baselines: the API route over the "
        "same data, same run, p99 of as many loads. The cold rows append one message before each "
        f"of {COLD_LOADS} loads (not timed), so every load builds the context afresh on the "
        "memory part kept since the last memory record (one untimed load first builds it, as "
        "the first read after a flush does); the other session page loads reuse the context "
        "kept since nothing changed."
    )
    return section


def _measure(
    section: Section,
    browser: httpx.Client,
    http: httpx.Client,
    tenant: str,
    ids: list[str],
    memory_id: str,
) -> None:
    base = f"/console/tenants/{tenant}/sessions/{SESSION}"
    api = f"/v1/sessions/{SESSION}"
    middle = ids[SIZE // 2]
    pages: list[tuple[str, str, str, str]] = [
        ("session page", base, "GET context", f"{api}/context"),
        ("branch page, root", f"{base}/entries", "GET entries", f"{api}/entries?limit=50"),
        (
            "branch page, entry 50,000",
            f"{base}/entries?after={middle}",
            "GET entries",
            f"{api}/entries?limit=50&after={middle}",
        ),
        ("recall page", f"{base}/memory/{memory_id}", "GET recall", f"{api}/memory/{memory_id}"),
        ("sessions page", f"/console/tenants/{tenant}/sessions", "GET sessions", "/v1/sessions"),
    ]
    # A cold session page: one message appended before each load (not timed), so the context
    # is built afresh every time, as after each agent turn.
    counter = iter(range(10**6))

    def appended(client: httpx.Client, path: str) -> httpx.Response:
        n = next(counter)
        entry = {"id": f"late-{n}", "kind": "message", "message": {"role": "user", "content": "x"}}
        http.post(f"{api}/entries", json={"entries": [entry]}).raise_for_status()
        return client.get(path)

    # The first load after the fill builds the memory part (the plan of 10,000 observations),
    # as the first read after each flush does; the rows below measure reads after appends.
    browser.get(base).raise_for_status()
    section.add(
        "session page after an append, p99",
        _p99(lambda: appended(browser, base), COLD_LOADS),
        "ms",
        "GET context after an append",
        _p99(lambda: appended(http, f"{api}/context"), COLD_LOADS),
    )
    for name, path, baseline_name, baseline_path in pages:
        console_ms = _p99(lambda path=path: browser.get(path))  # type: ignore[misc]
        api_ms = _p99(lambda path=baseline_path: http.get(path))  # type: ignore[misc]
        section.add(f"{name}, p99", console_ms, "ms", baseline_name, api_ms)
