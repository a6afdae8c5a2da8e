"""``om mcp``: serve the API to MCP hosts (:mod:`om_api.integrations.mcp_server`).

Over stdio (the default) the host spawns ``om mcp`` and speaks MCP on its stdin/stdout, so
nothing else may be printed to stdout; messages go to stderr. Over HTTP it serves streamable
HTTP at ``http://<host>:<port>/mcp`` until Ctrl-C.
"""

from __future__ import annotations

import contextlib
from enum import StrEnum
from typing import Annotated, Literal

import typer

from om_api.cli.common import fail, target
from om_api.cli.hints import install_hint

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class McpTransport(StrEnum):
    """How the MCP host reaches the server."""

    stdio = "stdio"
    http = "http"


def mcp(
    transport: Annotated[
        McpTransport, typer.Option(help="stdio: spawned by the host; http: streamable HTTP.")
    ] = McpTransport.stdio,
    host: Annotated[str, typer.Option(help="Interface to bind (http only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (http only).")] = 8765,
    api_url: Annotated[
        str | None, typer.Option("--api", help="Base URL of the om API (default: OM_API_URL).")
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", help="API key, Bearer (default: OM_API_KEY).", show_default=False),
    ] = None,
) -> None:
    """Serve the memory of one tenant (the API key's) as MCP tools: context, recall, entries,
    append, flush and status. Needs the MCP SDK (the package's mcp extra).

    Exit code 2 when the extra is missing or no API key is given.
    """
    try:
        from om_api.integrations.mcp_server import HTTP_PATH, run
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("mcp"):
            raise
        fail(
            f"the MCP server needs the MCP SDK ({exc.name} is not installed): "
            f"{install_hint('server,mcp')}",
            2,
        )
    url, api_key = target(api_url, key)
    if not api_key:
        fail("no API key for the MCP server: set OM_API_KEY or pass --key", 2)
    if transport is McpTransport.http:
        typer.echo(f"om mcp: streamable HTTP at http://{host}:{port}{HTTP_PATH}", err=True)
        if host not in LOOPBACK:
            typer.echo(
                f"om mcp: warning: callers are not authenticated; anyone reaching {host}:{port} "
                "reads and writes this tenant's memory",
                err=True,
            )
    kind: Literal["stdio", "http"] = "http" if transport is McpTransport.http else "stdio"
    with contextlib.suppress(KeyboardInterrupt):
        run(kind, api_url=url, api_key=api_key, host=host, port=port)
