"""The one handle a flush job has on its row, from its start to its finish.

A started job owns its session's memory unit of work: fenced with the epoch the start raised,
checking the session lock before every write, and holding its last batch back so the flush's
last records and the job's finish commit in one transaction. :meth:`RunningJob.finish` is the
only way the row is finished: with the held records while the job still owns the session,
alone (and ``failed``, saying why) once it was fenced out or its records could not be written.
A row the reconciler finished meanwhile keeps its state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from om_core.errors import FencedOutError
from om_workers.errors import LockLostError, StaleEpochError
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.metering import UsageMeter
from om_workers.metrics import METRICS
from om_workers.store import SqlMemoryUnitOfWork
from om_workers.store.records import FlushJob, JobFinish, StartedJob

log = logging.getLogger(__name__)


FinalState = Literal["succeeded", "failed", "skipped"]


@dataclass(frozen=True)
class Finished:
    """How a job ended: its final ``state``, the ``error`` stored on its row (redacted) and
    the ``reason`` it did nothing, as the row now holds them; ``deliveries``: the webhook
    deliveries its finish wrote (``None``: not known, as when the row had finished already)."""

    state: FinalState
    error: str | None = None
    reason: str | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    deliveries: tuple[str, ...] | None = None


class RunningJob:
    """A started flush job: its row as started (:attr:`job`), and the session's memory unit of
    work (:attr:`memory`) through which every record and the finish are written."""

    def __init__(
        self, deps: FlushDeps, started: StartedJob, *, before_write: Callable[[], None]
    ) -> None:
        self.job: FlushJob = started.job
        self._deps = deps
        # Every provider answer of the job is counted here; the totals go with its finish.
        self.meter = UsageMeter(self.job.tenant_id)
        self.memory = SqlMemoryUnitOfWork(
            deps.store,
            self.job.tenant_id,
            self.job.session_id,
            epoch=started.epoch,
            before_write=before_write,
            view=started.view,
            hold_last=True,
        )

    @property
    def lost_lock(self) -> bool:
        """Whether the job was fenced out because its session lock was lost (Redis restarted
        empty, or the lock expired while the worker stalled), rather than by a newer flush."""
        return isinstance(self.memory.fenced, LockLostError)

    def finish(
        self,
        state: FinalState,
        *,
        counts: Mapping[str, int] | None = None,
        error: str | None = None,
        reason: str | None = None,
        version: str | None = None,
    ) -> Finished:
        """Write the held records and finish the row in one fenced transaction.

        Once the job was fenced out (a newer flush raised the epoch, or the lock was lost) or
        the held records could not be written, the row is finished ``failed`` alone, with why.
        Raises only what :meth:`fail` raises.
        """
        counts = dict(counts or {})
        if self.memory.fenced is None:
            finish = JobFinish(
                self.job.id,
                state,
                counts,
                error,
                self._deps.secrets,
                reason,
                version,
                self.meter.totals(),
            )
            try:
                row = self.memory.finish(finish)
            except FencedOutError:
                pass  # kept in memory.fenced: finished as fenced out below
            except Exception as exc:
                lost = f"{type(exc).__name__}: {exc}"
                return self.fail(lost, counts=counts, version=version)
            else:
                if row is None:
                    log.warning("flush job %s was finished meanwhile; kept its state", self.job.id)
                    return Finished(state, error, reason, counts)
                return Finished(state, row.error, row.reason, counts, row.deliveries)
        if isinstance(self.memory.fenced, StaleEpochError):
            METRICS.fence_rejections.inc()
        fenced = f"fenced out before writing: {self.memory.fenced}"
        return self.fail(fenced, counts=counts, version=version)

    def fail(
        self,
        error: str,
        *,
        counts: Mapping[str, int] | None = None,
        version: str | None = None,
    ) -> Finished:
        """Finish the row ``failed`` with ``error`` (redacted when stored), writing nothing
        held but the job's model usage. ``version`` is the prompt version of a job that got as
        far as the pipeline.

        Raises :class:`~om_workers.errors.StoreUnavailableError` when the database cannot be
        reached (the message is then retried); a row already finished keeps its state.
        """
        counts = dict(counts or {})
        finish = JobFinish(
            self.job.id,
            "failed",
            counts,
            error,
            self._deps.secrets,
            prompt_version=version,
            usage=self.meter.totals(),
        )
        row = self._deps.store.finish_job_if_open(self.job.tenant_id, finish)
        if row is None:
            log.warning("flush job %s not finished as failed: finished or gone", self.job.id)
            return Finished("failed", error, None, counts)
        return Finished("failed", row.error, row.reason, counts, row.deliveries)


__all__ = ["Finished", "RunningJob"]
