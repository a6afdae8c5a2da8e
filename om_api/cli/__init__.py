"""The ``om`` command line (:mod:`om_api.cli.commands`), the embedded stack it runs
(:mod:`om_api.cli.stack`) and the demo (:mod:`om_api.cli.demo`).

:func:`main` is the console script: on a client-only install (no ``[server]`` extra) it says
which extra to install in one line instead of an ImportError's traceback.
"""

from __future__ import annotations

import sys
from typing import Any

from om_api.cli.hints import DISTRIBUTION, install_hint


def main() -> None:
    """Run the ``om`` command line; exit code 2 when the server packages are not installed."""
    try:
        from om_api.cli.commands import app
    except ModuleNotFoundError as exc:
        print(
            f"om: the command line needs the server packages ({exc.name} is not installed): "
            f"{install_hint('server')}",
            file=sys.stderr,
        )
        sys.exit(2)
    app()


def __getattr__(name: str) -> Any:
    if name == "app":  # the Typer app, for tests and for click's tooling
        from om_api.cli.commands import app

        return app
    raise AttributeError(name)


__all__ = ["DISTRIBUTION", "install_hint", "main"]
