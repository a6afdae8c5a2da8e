"""Work scopes and revocations."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from om_api.schemas.base import (
    MAX_REVOCATION_IDS,
    EntryId,
    PrincipalId,
    RequestModel,
    ScopeId,
    WireModel,
)
from om_api.schemas.entries import EntryOut


class OpenScopeRequest(RequestModel):
    """``POST .../scopes``: open a work scope under ``parent_id`` (default: the ``session``
    root)."""

    id: ScopeId
    parent_id: ScopeId | None = None
    kind: str | None = Field(default=None, max_length=512)
    label: str | None = Field(default=None, max_length=512)


class ScopeRefsRequest(RequestModel):
    """``bind`` / ``unbind``: ``om:<12-hex>`` or ``reflection:<12-hex>`` references."""

    refs: list[Annotated[str, Field(pattern=r"^(om|reflection):[a-f0-9]{12}$")]] = Field(
        min_length=1, max_length=4096
    )


class ScopePrincipalsRequest(RequestModel):
    """``grant`` / ``revoke``: the principals (session ids) to grant or revoke."""

    principal_ids: list[PrincipalId] = Field(min_length=1, max_length=1024)


class ScopeRecordOut(WireModel):
    """The scope record a scope operation appended; ``appended`` is false (and ``entry``
    null) when the request changed nothing (already bound/granted, nothing entered)."""

    appended: bool
    entry: EntryOut | None


class RevocationRequest(RequestModel):
    """``POST .../revocations``: entry ids whose derived memory must be withheld."""

    entry_ids: list[EntryId] = Field(min_length=1, max_length=MAX_REVOCATION_IDS)


class RevocationOut(WireModel):
    """``dropped_observation_ids``: active observations resting on the revoked entries, now
    dropped; ``tombstoned_ids``: entry ids newly withheld (already withheld ones are not
    repeated)."""

    dropped_observation_ids: list[str]
    tombstoned_ids: list[str]
