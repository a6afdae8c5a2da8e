"""17. Remote MCP: what a tool call at ``/mcp`` costs over the route it calls.

An embedded stack (SQLite, private Redis, ``om api``, one worker) and one session of 40
messages, flushed. Each round reads the session's context twice, in alternating order so both
see the same load: once as the MCP SDK's streamable-HTTP client calling the ``context`` tool
(one initialized client session, kept open), once as a keep-alive ``httpx`` GET of
``/v1/sessions/{id}/context``, the route the tool calls. The figures are the p50 and p99 of each;
their difference is what the MCP layer adds (the JSON-RPC envelope, the SDK's stateless
transport, the key check of the gate, the in-process request). Rate limits are off, as for
the other latency benchmarks.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import anyio
import httpx
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from om_api.cli.stack import Stack, StackConfig
from om_api.client import OMClient

from .common import Section, percentile

ROUNDS = 300
WARMUP = 20
MESSAGES = 40
SESSION = "bench-mcp"
LOW = {"observation": {"messageTokens": 1}}


def _prepare(api_url: str, key: str) -> None:
    with OMClient(api_url, key) as om:
        om.create_session(SESSION)
        om.append(
            SESSION,
            [
                {
                    "role": "user" if i % 2 else "assistant",
                    "content": f"Step {i}: deployed build {i} of the payments service to staging.",
                }
                for i in range(MESSAGES)
            ],
        )
        job = om.wait_for_job(om.flush(SESSION, force=True).job_id, timeout_s=120)
        assert job.state == "succeeded", job.error


async def _measure(api_url: str, key: str) -> tuple[list[float], list[float]]:
    headers = {"Authorization": f"Bearer {key}"}
    tool_ms: list[float] = []
    route_ms: list[float] = []
    async with (
        httpx.AsyncClient(base_url=api_url, headers=headers, timeout=60) as http,
        httpx2.AsyncClient(headers=headers, timeout=60) as mcp_http,
        streamable_http_client(f"{api_url}/mcp", http_client=mcp_http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()

        async def tool() -> float:
            start = time.perf_counter()
            result = await session.call_tool("context", {"session_id": SESSION})
            assert not result.is_error, result
            return (time.perf_counter() - start) * 1000

        async def route() -> float:
            start = time.perf_counter()
            answer = await http.get(f"/v1/sessions/{SESSION}/context")
            answer.raise_for_status()
            return (time.perf_counter() - start) * 1000

        for n in range(WARMUP + ROUNDS):
            first, second = (tool, route) if n % 2 else (route, tool)
            a, b = await first(), await second()
            if n < WARMUP:
                continue
            tool_ms.append(a if first is tool else b)
            route_ms.append(b if first is tool else a)
    return tool_ms, route_ms


def run() -> Section:
    section = Section("17. Remote MCP: a tool call at /mcp against its HTTP route")
    with tempfile.TemporaryDirectory() as folder:
        config = StackConfig(
            database_url=f"sqlite:///{Path(folder) / 'om.db'}",
            api_port=0,
            beat=False,
            flower=False,
            env={
                "OM_SETTINGS_JSON": json.dumps(LOW),
                "OM_PROVIDER": "extractive",
                "OM_RATE_LIMITS_ENABLED": "false",
            },
            log_dir=Path(folder) / "logs",
        )
        with Stack(config) as running:
            info = running.info
            _prepare(info.api_url, info.api_key)
            load_before = os.getloadavg()[0]
            tool_ms, route_ms = anyio.run(_measure, info.api_url, info.api_key)
            load_after = os.getloadavg()[0]
    for share, label in ((0.5, "p50"), (0.99, "p99")):
        section.add(
            f"context tool at /mcp, {label}",
            percentile(tool_ms, share),
            "ms",
            "GET .../context",
            percentile(route_ms, share),
        )
    section.notes = [
        f"{ROUNDS} rounds after {WARMUP} warm-up rounds, each one tool call and one route call "
        f"in alternating order, on one session of {MESSAGES} flushed messages (SQLite, one API "
        "process, rate limits off). The tool call is one MCP client session's `tools/call` "
        "(stateless, JSON answer); the route a keep-alive httpx GET.",
        f"Load average (1 min) {load_before:.1f} before, {load_after:.1f} after, on 2 shared "
        "cores.",
    ]
    return section
