"""22. The OpenAI-compatible proxy: what it saves upstream, and what it costs in latency.

One client holds a 200-turn conversation and sends its whole history on every turn, through
``POST /v1/proxy/chat/completions`` of the embedded stack (``om api``, one ``celery worker``
flushing with the offline extractive provider, a private Redis, SQLite) to a local
OpenAI-compatible server (:mod:`tests.integrations.openai_server`) that records what it
received. Figures: tokens the upstream received against tokens the client sent (estimated by
the service's own token estimate, over the messages' JSON); then the proxy's latency against
calling the same upstream directly, in the same run: p50 of a non-streamed turn, and p50 of
the time to the first body byte of a streamed one. After the conversation, every earlier
message must be in sight: shown in the last forwarded request, or the source of a memory item
it shows (one recall away).

``python -m tests.bench.bench_proxy`` prints the figures without writing the results file.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from om_api.cli.stack import Stack, StackConfig, StackInfo
from om_core.ledger.tokens import estimate_text_tokens
from tests.integrations.openai_server import ChatServer, last_user_text

from .common import Section, percentile

TURNS = 200
LATENCY_TURNS = 60
SETTINGS = {
    "observation": {"messageTokens": 1500},
    "reflection": {"observationTokens": 4000},
    "context": {"observationsPoolMaxTokens": 1_000_000},
}
PACE_TIMEOUT_S = 120.0
SYSTEM = {"role": "system", "content": "You are the release assistant of a small team."}
MEMORY_ID = re.compile(r"\[(?:om|reflection):([a-f0-9]{12})\]")


def user_text(turn: int) -> str:
    """A user turn of about 600 characters: two facts in prose that carries none."""
    return (
        f"Build {1000 + turn} passed its checks this morning, please deploy it to "
        f"host-{turn % 17} in region eu-{turn % 3} once the window opens. The review went "
        "well this time around and nobody had much to add beyond the usual remarks about "
        "naming and comments. It was a quiet day overall, with the usual coffee break and "
        "a short chat about the weather and the football on the weekend. Most of the "
        "afternoon went into reading through older notes and tidying up the shared folder "
        f"so that the next person finds things quickly. Ticket OPS-{4000 + turn} tracks it."
    )


def reply(request: dict[str, Any]) -> str:
    """An assistant turn of about 450 characters, naming the build it was asked about."""
    build = re.search(r"Build (\d+)", last_user_text(request))
    return (
        f"Noted, build {build.group(1) if build else 'unknown'} goes out when the window "
        "opens. I will start the rollout after the current window closes and keep an eye on "
        "the dashboards while it runs, the way it usually goes on a quiet day like this "
        "one. There is nothing unusual in the notes so far, and the earlier rollouts went "
        "through without any trouble at all. Let me know if anything else should change "
        "before then, otherwise I will report back once it is done."
    )


def tokens(messages: list[dict[str, Any]]) -> int:
    return estimate_text_tokens(json.dumps(messages, ensure_ascii=False))


def conversation(
    api: httpx.Client, upstream: ChatServer, session: str
) -> tuple[int, int, list[float]]:
    """The 200 turns; returns the tokens sent by the client, those the upstream received and
    each turn's seconds through the proxy."""
    history: list[dict[str, Any]] = [SYSTEM]
    sent = received = 0
    seconds = []
    for turn in range(TURNS):
        history.append({"role": "user", "content": user_text(turn)})
        start = time.perf_counter()
        answer = api.post(
            "/v1/proxy/chat/completions",
            headers={"X-OM-Session": session},
            json={"model": "m", "messages": history},
        )
        seconds.append(time.perf_counter() - start)
        answer.raise_for_status()
        sent += tokens(history)
        received += tokens(upstream.requests[-1].body["messages"])
        history.append(answer.json()["choices"][0]["message"])
        settled(api, session)
    return sent, received, seconds


def settled(api: httpx.Client, session: str) -> None:
    """Wait until the flush the turn requested is done: a model answers in seconds, the
    extractive flush in milliseconds, so memory keeps pace with a real conversation; here
    the upstream answers at once, and the wait stands in for the model's time."""
    deadline = time.monotonic() + PACE_TIMEOUT_S
    while api.get(f"/v1/sessions/{session}/status").json()["in_flight"]:
        if time.monotonic() > deadline:
            raise AssertionError(f"a flush of {session} did not finish")
        time.sleep(0.02)


def out_of_sight(api: httpx.Client, session: str, forwarded: list[dict[str, Any]]) -> list[str]:
    """The session's messages that the last forwarded request neither shows nor cites (but
    its own answer, recorded after it was sent)."""
    shown = json.dumps(forwarded, ensure_ascii=False)
    cited: set[str] = set()
    for memory_id in set(MEMORY_ID.findall(shown)):
        found = api.get(f"/v1/sessions/{session}/memory/{memory_id}").json()
        cited.update(found.get("source_entry_ids") or [])
        for observation in found.get("supporting_observations") or []:
            cited.update(observation.get("source_entry_ids") or [])
    messages = [e for e in branch(api, session) if e["kind"] == "message" and e.get("message")]
    return [
        entry["id"]
        for entry in messages[:-1]
        if entry["message"]["content"] not in shown and entry["id"] not in cited
    ]


def branch(api: httpx.Client, session: str) -> list[dict[str, Any]]:
    """Every entry of the session's branch, page by page."""
    found: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 1000}
    while True:
        page = api.get(f"/v1/sessions/{session}/entries", params=params).json()
        found += page["entries"]
        if not page.get("next_cursor"):
            return found
        params["after"] = page["next_cursor"]


def timed(call: Callable[[], float]) -> list[float]:
    call()  # a warm-up: connections, the first session's creation
    return [call() for _ in range(LATENCY_TURNS)]


def latencies(api: httpx.Client, direct: httpx.Client, session: str) -> dict[str, list[float]]:
    history = [SYSTEM, {"role": "user", "content": user_text(0)}]
    body = {"model": "m", "messages": history}

    def whole(client: httpx.Client, path: str) -> Callable[[], float]:
        def call() -> float:
            start = time.perf_counter()
            client.post(path, headers={"X-OM-Session": session}, json=body).raise_for_status()
            return time.perf_counter() - start

        return call

    def first_byte(client: httpx.Client, path: str) -> Callable[[], float]:
        def call() -> float:
            start = time.perf_counter()
            headers = {"X-OM-Session": session}
            with client.stream("POST", path, headers=headers, json={**body, "stream": True}) as r:
                chunks = r.iter_raw()
                next(chunks)
                seconds = time.perf_counter() - start
                for _ in chunks:
                    pass
            return seconds

        return call

    return {
        "proxy": timed(whole(api, "/v1/proxy/chat/completions")),
        "direct": timed(whole(direct, "/chat/completions")),
        "proxy ttfb": timed(first_byte(api, "/v1/proxy/chat/completions")),
        "direct ttfb": timed(first_byte(direct, "/chat/completions")),
    }


def measure(folder: Path) -> tuple[Section, list[str]]:
    section = Section("22. OpenAI-compatible proxy: tokens upstream and added latency")
    with ChatServer(reply, stream_pieces=4) as upstream:
        config = StackConfig(
            database_url=f"sqlite:///{folder / 'om.db'}",
            api_port=0,
            flower_port=0,
            beat=False,
            flower=False,
            env={
                "OM_SETTINGS_JSON": json.dumps(SETTINGS),
                "OM_PROXY_UPSTREAM_URL": upstream.base_url,
                "OM_RATE_LIMITS_ENABLED": "false",
            },
            log_dir=folder / "logs",
        )
        with Stack(config) as running:
            info: StackInfo = running.info
            headers = {"Authorization": f"Bearer {info.api_key}"}
            with (
                httpx.Client(base_url=info.api_url, headers=headers, timeout=60) as api,
                httpx.Client(base_url=upstream.base_url, timeout=60) as direct,
            ):
                sent, received, _ = conversation(api, upstream, "bench-proxy-200")
                missing = out_of_sight(
                    api, "bench-proxy-200", upstream.requests[-1].body["messages"]
                )
                timings = latencies(api, direct, "bench-proxy-latency")
    section.add(
        f"tokens sent upstream, {TURNS}-turn conversation",
        received,
        "tokens",
        "tokens the client sent",
        sent,
    )
    p50 = {name: percentile(values, 0.5) * 1000 for name, values in timings.items()}
    section.add(
        "p50 non-streamed turn through the proxy",
        p50["proxy"],
        "ms",
        "same request to the upstream directly",
        p50["direct"],
    )
    section.add(
        "p50 time to first byte, streamed, through the proxy",
        p50["proxy ttfb"],
        "ms",
        "same request to the upstream directly",
        p50["direct ttfb"],
    )
    load = os.getloadavg()
    section.notes.append(
        f"Added latency: {p50['proxy'] - p50['direct']:.1f} ms non-streamed (goal <= 15 ms), "
        f"{p50['proxy ttfb'] - p50['direct ttfb']:.1f} ms to the first byte streamed (goal <= "
        f"20 ms); {LATENCY_TURNS} requests each, after one warm-up, one history of two "
        f"messages. Token ratio goal <= 0.3. Messages out of sight after {TURNS} turns: "
        f"{len(missing)}. Observer threshold {SETTINGS['observation']['messageTokens']} "
        f"tokens, reflection threshold {SETTINGS['reflection']['observationTokens']} tokens, "
        "no dropping (pool cap 1,000,000 tokens). Load average at the end: "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}."
    )
    return section, missing


def run() -> Section:
    with tempfile.TemporaryDirectory() as folder:
        section, missing = measure(Path(folder))
    if missing:
        print(f"  messages out of sight: {len(missing)}, first {missing[:3]}", flush=True)
    return section


if __name__ == "__main__":
    print(run().markdown())
