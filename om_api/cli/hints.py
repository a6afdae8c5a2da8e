"""How to install what a command needs: one line that works from a checkout and from the index."""

from __future__ import annotations

from typing import Final

DISTRIBUTION: Final = "observational-memory-service"
"""The name this project is published under (``observational-memory`` is somebody else's)."""


def install_hint(extras: str) -> str:
    """How to install ``extras`` (``server``, ``mcp`` ...), from a checkout or the index."""
    return (
        f"pip install '.[{extras}]' in a checkout, or pip install '{DISTRIBUTION}[{extras}]' "
        "from the package index"
    )
