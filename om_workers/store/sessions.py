"""Session operations of the service layer: create, append, fence, fork, link, revoke.

Each is a short function over one write unit of work: lock what it changes, ask the
repositories, commit. :class:`~om_workers.store.SqlStore` delegates to these; its methods'
docstrings state what each raises.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from om_core.errors import InvalidEntryError
from om_core.ledger.models import SessionEntry
from om_workers.errors import EntryNotFoundError, SessionExistsError, StaleEpochError
from om_workers.store.funnel import append_with_copies, check_link
from om_workers.store.records import AppendResult, FlushJob, JobFinish, SessionInfo
from om_workers.store.schema import ID_LENGTH
from om_workers.store.service import Service, retry_once_after_race


class SessionService(Service):
    """The writes of a tenant's sessions (see :class:`~om_workers.store.SqlStore`)."""

    def create_session(
        self,
        tenant_id: str,
        session_id: str | None,
        *,
        metadata: Mapping[str, Any] | None,
        workspace: str | None,
    ) -> SessionInfo:
        """Create an empty session, linked to ``workspace`` when given."""
        new_id = session_id if session_id is not None else uuid.uuid4().hex
        if not new_id or len(new_id) > ID_LENGTH:
            raise InvalidEntryError(f"a session id has 1 to {ID_LENGTH} characters")

        def create() -> SessionInfo:
            with self._units.write() as uow:
                uow.sessions.require_tenant(tenant_id)
                if uow.sessions.exists(tenant_id, new_id):
                    raise SessionExistsError(f"session {new_id!r} already exists")
                if uow.erasure.is_pending(tenant_id, new_id):
                    # Its erasure would take the new session's funnel copies and Redis keys
                    # for the old one's.
                    raise SessionExistsError(
                        f"session {new_id!r} is being erased; create it again once its "
                        "erasure job has succeeded"
                    )
                if workspace is not None:
                    check_link(uow, tenant_id, new_id, workspace)
                uow.sessions.insert(
                    tenant_id,
                    new_id,
                    metadata=metadata or {},
                    workspace_id=workspace,
                    now=uow.now(),
                )
                info = uow.sessions.info(tenant_id, new_id)
                uow.commit()
                return info

        return retry_once_after_race(create)

    def append_entries(
        self, tenant_id: str, session_id: str, batch: Sequence[SessionEntry]
    ) -> AppendResult:
        """Append a batch at the leaf (and its copies onto a linked workspace)."""

        def append() -> AppendResult:
            with self._units.write() as uow:
                session = uow.sessions.lock(tenant_id, session_id)
                result = append_with_copies(uow, session, batch, now=uow.now())
                uow.commit()
                return result

        return retry_once_after_race(append)

    def append_memory_and_finish(
        self,
        tenant_id: str,
        session_id: str,
        batch: Sequence[SessionEntry],
        epoch: int,
        finish: JobFinish | None,
    ) -> tuple[AppendResult, FlushJob | None]:
        """A fenced append, and the flush job's finish, in one unit of work."""

        def append() -> tuple[AppendResult, FlushJob | None]:
            with self._units.write() as uow:
                session = uow.sessions.lock(tenant_id, session_id)
                if session.epoch != epoch:
                    raise StaleEpochError(session_id, epoch, session.epoch)
                now = uow.now()
                # Memory records are never copied, but a linked session's invariant (every
                # observable message has its copy) holds for every way in.
                result = append_with_copies(uow, session, batch, now=now)
                job = None if finish is None else uow.jobs.finish(tenant_id, finish, now=now)
                uow.commit()
                return result, job

        return retry_once_after_race(append)

    def raise_epoch(self, tenant_id: str, session_id: str) -> int:
        """Raise the session's fencing epoch; the new epoch."""
        with self._units.write() as uow:
            epoch = uow.sessions.raise_epoch(tenant_id, session_id, now=uow.now())
            uow.commit()
            return epoch

    def fork(self, tenant_id: str, session_id: str, entry_id: str) -> SessionInfo:
        """Move the leaf to an entry of the session, and the memory state with it."""
        with self._units.write() as uow:
            session = uow.sessions.lock(tenant_id, session_id)
            if uow.entries.position(session.pk, entry_id) is None:
                raise EntryNotFoundError(f"no entry {entry_id!r} in session {session_id!r}")
            now = uow.now()
            tokens = uow.memory.refresh(session.pk, entry_id, now=now)
            uow.sessions.fork(session.pk, entry_id, unobserved_tokens=tokens, now=now)
            info = uow.sessions.info_by_pk(session.pk)
            uow.commit()
            return info

    def link_session(self, tenant_id: str, session_id: str, workspace_id: str) -> SessionInfo:
        """Link the session to a workspace session (after :func:`check_link`)."""
        with self._units.write() as uow:
            session = uow.sessions.lock(tenant_id, session_id)
            check_link(uow, tenant_id, session_id, workspace_id)
            uow.links.set(session.pk, workspace_id, now=uow.now())
            info = uow.sessions.info_by_pk(session.pk)
            uow.commit()
            return info

    def unlink_session(self, tenant_id: str, session_id: str) -> SessionInfo:
        """Unlink the session from its workspace."""
        with self._units.write() as uow:
            session = uow.sessions.lock(tenant_id, session_id)
            uow.links.set(session.pk, None, now=uow.now())
            info = uow.sessions.info_by_pk(session.pk)
            uow.commit()
            return info

    def add_tombstones(
        self, tenant_id: str, scope: str, entry_ids: Iterable[str], *, corrected: bool
    ) -> tuple[str, ...]:
        """Withhold entry ids in a scope; the ids not withheld before."""
        wanted = list(dict.fromkeys(entry_ids))
        with self._units.write() as uow:
            uow.sessions.require_tenant(tenant_id)
            known = uow.tombstones.withheld(tenant_id, scope)
            fresh = [entry_id for entry_id in wanted if entry_id not in known]
            again = [entry_id for entry_id in wanted if entry_id in known]
            if fresh:
                uow.tombstones.insert(tenant_id, scope, fresh, corrected=corrected, now=uow.now())
            if again:
                uow.tombstones.set_corrected(tenant_id, scope, again, corrected=corrected)
            uow.commit()
        return tuple(fresh)
