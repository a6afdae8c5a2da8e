"""The mixed load: agent servers of two tenants driving sessions through the Python API client.

Each thread owns a few sessions (so every session's appends are ordered) and repeats an agent
run on each: append a user/assistant turn (ids fixed, so a retry is idempotent), ask for a
flush, read the context, recall one memory id the context shows. An append is re-sent until
the API confirms it (through outages), every other call is tried once (the client's own
retries apply). Every HTTP exchange is recorded with its wall time and status by
:class:`RecordingTransport`, which also scans every response body for secrets.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from om_api.client import Conflict, OMClient, OMClientError, RetryPolicy
from tests.deploy.rehearsal import _chat

MEMORY_REF: Final = re.compile(r"\[(?:om|reflection):([0-9a-f]{12})\]")
"""A memory id as the rendered memory block shows it: ``- [om:<id>] text``."""
RESEND_PAUSE_S: Final = 0.5
CLIENT_RETRY: Final = RetryPolicy(attempts=4, base_s=0.25, cap_s=2.0)


@dataclass(frozen=True)
class Exchange:
    """One HTTP attempt: wall times (``time.time()``) it was sent ``at`` and ended ``done``,
    method, path, status (``None``: no answer, ``error`` names the transport error) and the
    ``Retry-After`` of the answer."""

    at: float
    done: float
    method: str
    path: str
    status: int | None
    error: str | None = None
    retry_after: str | None = None


class Recorder:
    """Every exchange of the run, and every secret found in a response body."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        self.secrets = dict(secrets)
        self.exchanges: list[Exchange] = []
        self.leaks: list[str] = []
        self._lock = threading.Lock()

    def add(self, exchange: Exchange, body: bytes = b"") -> None:
        found = [label for label, value in self.secrets.items() if value.encode() in body]
        with self._lock:
            self.exchanges.append(exchange)
            self.leaks += [
                f"{label} in the body of {exchange.method} {exchange.path}" for label in found
            ]

    def between(self, start: float, end: float) -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if start <= e.at <= end]


class RecordingTransport(httpx.BaseTransport):
    """``httpx.HTTPTransport`` that records each attempt (the client retries above it)."""

    def __init__(self, recorder: Recorder) -> None:
        self._inner = httpx.HTTPTransport()
        self._recorder = recorder

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        at = time.time()
        try:
            response = self._inner.handle_request(request)
            try:
                raw = b"".join(response.stream)  # type: ignore[arg-type]
            finally:
                response.close()
        except httpx.TransportError as exc:
            failed = Exchange(
                at, time.time(), request.method, request.url.path, None, type(exc).__name__
            )
            self._recorder.add(failed)
            raise
        retry_after = response.headers.get("retry-after")
        done = Exchange(
            at,
            time.time(),
            request.method,
            request.url.path,
            response.status_code,
            None,
            retry_after,
        )
        self._recorder.add(done, raw)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=httpx.ByteStream(raw),
            request=request,
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()


def client_for(api_url: str, key: str, recorder: Recorder) -> OMClient:
    """An API client of one tenant whose every attempt is recorded."""
    return OMClient(
        api_url, key, timeout_s=10.0, retry=CLIENT_RETRY, transport=RecordingTransport(recorder)
    )


@dataclass
class SessionLoad:
    """One session of the load and what the API confirmed about it.

    ``acked``: message ids the API confirmed stored (appended or duplicate), in order;
    ``unconfirmed``: ids of an append given up on at the end (maybe stored, maybe not);
    ``unrecallable``: memory ids a context showed that recall did not find; ``anomalies``:
    answers no outage explains (a 409 on a re-sent append ...).
    """

    tenant: str
    session: str
    acked: list[str] = field(default_factory=list)
    unconfirmed: list[str] = field(default_factory=list)
    unrecallable: list[str] = field(default_factory=list)
    anomalies: list[str] = field(default_factory=list)
    runs: int = 0
    flushes: int = 0


class Load:
    """Agent runs on ``sessions`` from ``threads`` threads, one every ``pause_s`` per thread.

    :meth:`start` creates the sessions and the threads; :meth:`stop` lets each thread finish
    its current run (an unconfirmed append is re-sent for at most ``give_up_s`` more).
    """

    def __init__(
        self,
        api_url: str,
        keys: Mapping[str, str],
        sessions: Iterable[tuple[str, str]],
        recorder: Recorder,
        *,
        threads: int,
        pause_s: float,
        give_up_s: float,
        seed: int = 0,
    ) -> None:
        self.api_url = api_url
        self.keys = dict(keys)
        self.sessions = [SessionLoad(tenant, session) for tenant, session in sessions]
        self.recorder = recorder
        self.pause_s = pause_s
        self.give_up_s = give_up_s
        self._threads = [
            threading.Thread(
                target=self._drive, args=(self.sessions[i::threads], seed + i), daemon=True
            )
            for i in range(min(threads, len(self.sessions)))
        ]
        self._stop = threading.Event()
        self._stop_at = float("inf")

    def start(self) -> None:
        clients = {t: client_for(self.api_url, k, self.recorder) for t, k in self.keys.items()}
        try:
            for load in self.sessions:
                clients[load.tenant].create_session(load.session)
        finally:
            for client in clients.values():
                client.close()
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop_at = time.monotonic()
        self._stop.set()
        for thread in self._threads:
            thread.join(self.give_up_s + 60)

    def burst(self) -> None:
        """One agent run on every session, from the calling thread (the load is stopped)."""
        rng = random.Random(len(self.sessions))
        clients = {t: client_for(self.api_url, k, self.recorder) for t, k in self.keys.items()}
        try:
            for load in self.sessions:
                self._agent_run(clients[load.tenant], load, rng)
        finally:
            for client in clients.values():
                client.close()

    def _drive(self, mine: list[SessionLoad], seed: int) -> None:
        rng = random.Random(seed)
        clients = {t: client_for(self.api_url, k, self.recorder) for t, k in self.keys.items()}
        try:
            while not self._stop.is_set():
                for load in mine:
                    if self._stop.is_set():
                        break
                    self._agent_run(clients[load.tenant], load, rng)
                self._stop.wait(self.pause_s)
        finally:
            for client in clients.values():
                client.close()

    def _agent_run(self, client: OMClient, load: SessionLoad, rng: random.Random) -> None:
        entries = _chat(load.session, load.runs, 1)
        load.runs += 1
        if not self._append(client, load, entries):
            return
        try:
            client.flush(load.session)
            load.flushes += 1
            context = client.context(load.session)
            shown = MEMORY_REF.findall(context.blocks[0].text)
            if shown:
                memory_id = rng.choice(shown)
                if not client.recall(load.session, memory_id).found:
                    load.unrecallable.append(memory_id)
        except OMClientError:
            pass  # an outage: the agent goes on; the checks after quiescence judge the memory

    def _append(self, client: OMClient, load: SessionLoad, entries: list[dict[str, Any]]) -> bool:
        ids = [entry["id"] for entry in entries]
        while True:
            try:
                answer = client.append(load.session, entries)
            except Conflict as exc:
                load.anomalies.append(f"append {ids[0]}: {exc}")
                load.unconfirmed += ids
                return False
            except OMClientError:
                if time.monotonic() > self._stop_at + self.give_up_s:
                    load.unconfirmed += ids
                    return False
                time.sleep(RESEND_PAUSE_S)
                continue
            confirmed = set(answer.appended_ids) | set(answer.duplicate_ids)
            if confirmed != set(ids):
                load.anomalies.append(f"append {ids}: confirmed only {sorted(confirmed)}")
            load.acked += ids
            return True
