"""The HTTP API of observational memory (FastAPI under uvicorn).

:func:`create_app` builds the app; :mod:`om_api.schemas` holds the wire models the Python
client uses. ``om_api`` may import ``om_workers`` and ``om_core``; nothing imports it.
"""

from om_api.app import create_app

__all__ = ["create_app"]
