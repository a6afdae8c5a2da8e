"""The HTTP API (FastAPI under uvicorn): :func:`create_app` builds the app from the settings."""

from om_api.server.app import create_app

__all__ = ["create_app"]
