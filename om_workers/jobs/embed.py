"""The embedding job body (what ``om.embed`` runs after a flush), pure of Celery.

It gives the session's messages and memory the vectors they lack (see
:meth:`~om_workers.store.vectors.VectorService.embed_session`): idempotent, so a duplicate or
a rerun after a failure only fills what is missing. It never runs on the request path; until
it has run, a hybrid search simply finds the newest items by their words alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from om_core.errors import NotFoundError, UnavailableError
from om_workers.embeddings.port import Embedder, EmbeddingError
from om_workers.store import SqlStore

log = logging.getLogger(__name__)

EmbedOutcome = Literal["succeeded", "failed", "skipped", "unavailable"]


@dataclass(frozen=True)
class EmbedRun:
    """What one embedding run did: its outcome and the vectors it wrote."""

    outcome: EmbedOutcome
    vectors: int = 0


def run_embed_job(
    store: SqlStore,
    embedder: Embedder | None,
    tenant_id: str,
    session_id: str,
    *,
    batch_size: int,
    secrets: tuple[str, ...] = (),
) -> EmbedRun:
    """Embed what the session lacks. ``skipped`` when embeddings are off or the session is
    gone (erased meanwhile), ``unavailable`` when the database or the embeddings endpoint is
    down (the next flush's job, or ``om search embed``, fills the gap), ``failed`` for an
    unusable answer. Never raises for these: they are its outcome."""
    if embedder is None:
        return EmbedRun("skipped")
    try:
        written = store.vectors.embed_session(
            tenant_id, session_id, embedder, batch_size=batch_size, secrets=secrets
        )
    except NotFoundError:
        return EmbedRun("skipped")
    except UnavailableError as exc:
        log.warning("embedding %s/%s: %s", tenant_id, session_id, exc)
        return EmbedRun("unavailable")
    except EmbeddingError as exc:
        log.error("embedding %s/%s failed: %s", tenant_id, session_id, exc)
        return EmbedRun("failed")
    return EmbedRun("succeeded", written)


__all__ = ["EmbedOutcome", "EmbedRun", "run_embed_job"]
