"""The web console at ``/console``: server-rendered pages over the same reads and actions as
the HTTP routes, signed in with an API key (one tenant) or the admin token (every tenant).

:func:`install` mounts it on the API app.
"""

from __future__ import annotations

from fastapi import FastAPI

from om_api.server.console import access, actions, admin, pages
from om_api.server.console.guard import install_handlers


def install(app: FastAPI) -> None:
    """Mount the console's routers and its sign-in and form error handlers on ``app``."""
    for router in (access.router, pages.router, actions.router, admin.router):
        app.include_router(router)
    install_handlers(app)
