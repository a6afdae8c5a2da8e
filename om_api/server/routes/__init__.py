"""The API's routers, one module per concern; :func:`om_api.server.app.create_app` mounts them.

Every id in a path is checked against :data:`~om_api.schemas.PATH_ID_PATTERN` (or the memory-id
pattern), the same pattern the id was checked against when it was created.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path

from om_api.schemas import MEMORY_ID_PATTERN, PATH_ID_PATTERN, SCOPE_ID_PATTERN, ErrorBody

SessionPath = Annotated[str, Path(pattern=PATH_ID_PATTERN, description="Session id.")]
JobPath = Annotated[str, Path(pattern=PATH_ID_PATTERN, description="Flush job id.")]
TenantPath = Annotated[str, Path(pattern=PATH_ID_PATTERN, description="Tenant id.")]
KeyPath = Annotated[str, Path(pattern=PATH_ID_PATTERN, description="API key id (not the key).")]
MemoryPath = Annotated[
    str, Path(pattern=MEMORY_ID_PATTERN, description="Observation or reflection id.")
]
ScopePath = Annotated[str, Path(pattern=SCOPE_ID_PATTERN, description="Work-scope id.")]


def error_answers(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses`` for the error statuses it documents: each answers an
    :class:`~om_api.schemas.ErrorBody`."""
    return {status: {"model": ErrorBody} for status in statuses}
