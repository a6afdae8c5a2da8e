"""The HTTP API (FastAPI under uvicorn): :func:`create_app` builds the app from the settings.

The app is imported on first use of ``create_app``, not with this package: the command line
imports small parts of it (wire conversions) and should not pay for the whole app.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from om_api.server.app import create_app


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from om_api.server.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["create_app"]
