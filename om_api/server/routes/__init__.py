"""The API's routers, one module per concern; :func:`om_api.server.app.create_app` mounts them."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from om_api.schemas import ENTRY_ID_PATTERN, MEMORY_ID_PATTERN, SCOPE_ID_PATTERN

SessionPath = Annotated[str, Path(pattern=ENTRY_ID_PATTERN, description="Session id.")]
JobPath = Annotated[str, Path(pattern=ENTRY_ID_PATTERN, description="Flush job (run) id.")]
TenantPath = Annotated[str, Path(pattern=ENTRY_ID_PATTERN, description="Tenant id.")]
MemoryPath = Annotated[
    str, Path(pattern=MEMORY_ID_PATTERN, description="Observation or reflection id.")
]
ScopePath = Annotated[str, Path(pattern=SCOPE_ID_PATTERN, description="Work-scope id.")]
