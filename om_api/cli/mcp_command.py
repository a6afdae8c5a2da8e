"""``om mcp``: serve the API to an MCP host over stdio (:mod:`om_api.integrations.mcp_server`).

The host spawns ``om mcp`` and speaks MCP on its stdin/stdout, so nothing else may be printed
to stdout; messages go to stderr. Over HTTP, ``om api`` itself serves MCP at ``/mcp``, each
caller authenticated by its own API key.
"""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer

from om_api.cli.common import fail, target
from om_api.cli.hints import install_hint


def mcp(
    api_url: Annotated[
        str | None, typer.Option("--api", help="Base URL of the om API (default: OM_API_URL).")
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", help="API key, Bearer (default: OM_API_KEY).", show_default=False),
    ] = None,
) -> None:
    """Serve the memory of one tenant (the API key's) as MCP tools over stdio: context,
    recall, search, sessions, entries, append, flush and status. For MCP over HTTP, point the
    host at the API's /mcp with its own API key instead.

    Exit code 2 when the MCP SDK is missing or no API key is given.
    """
    try:
        from om_api.integrations.mcp_server import run
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("mcp"):
            raise
        fail(
            f"the MCP server needs the MCP SDK ({exc.name} is not installed): "
            f"{install_hint('server')}",
            2,
        )
    url, api_key = target(api_url, key)
    if not api_key:
        fail("no API key for the MCP server: set OM_API_KEY or pass --key", 2)
    with contextlib.suppress(KeyboardInterrupt):
        run(api_url=url, api_key=api_key)
