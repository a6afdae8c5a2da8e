"""A watch for runs whose worker died, every few seconds instead of every reconciler pass.

A worker killed mid-flush leaves its job ``running`` and its session locked by a dead process.
The reconciler fails such a job and requests its session again, but beat runs it only every
``OM_RECONCILE_INTERVAL_S``; on the Redis broker the dead worker's message comes back only
after the visibility timeout. This watch runs that one step
(:func:`om_workers.jobs.reconcile.heal_lost_runs`) every half liveness TTL from every worker
process, and a Redis claim lets one process a turn do it for the cluster, so a killed worker's
session is flushing again a few seconds after its liveness key expired. The same look frees
the fair-queue places of killed prefork children (:meth:`FairPublisher.reap`): their parent's
slots stay advertised, so no pool expiry would.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from om_workers.coordination import keys, liveness, timing
from om_workers.coordination.connection import translate_errors
from om_workers.coordination.fairness import FairPublisher
from om_workers.coordination.heartbeats import Heartbeats
from om_workers.errors import OMWorkersError
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.reconcile import heal_lost_runs

log = logging.getLogger(__name__)


class LostRunWatch:
    """Looks for runs of dead workers until :meth:`stop`; ``deps`` gives the process's flush
    dependencies (store, Redis, publisher, lock TTL) on first use. ``heartbeats`` runs the
    looks (default: a scheduler thread of its own)."""

    def __init__(self, deps: Callable[[], FlushDeps], heartbeats: Heartbeats | None = None) -> None:
        self._deps = deps
        self._heartbeats = heartbeats or Heartbeats(name="om-lost-run-watch")
        self._stopped = False

    def start(self) -> None:
        """Look every :func:`timing.lost_run_watch_interval_s` seconds from now on."""
        self._heartbeats.schedule(self._interval_s(), self._beat)

    def stop(self) -> None:
        """Look no more (a look in progress finishes)."""
        self._stopped = True

    def look(self) -> tuple[str, ...]:
        """One look, if no other process claimed this turn: the ids of the jobs it failed.
        Raises :class:`~om_workers.errors.RedisUnavailableError` or a store error."""
        deps = self._deps()
        turn_ms = timing.ttl_ms(self._interval_s())
        with translate_errors("claiming the lost-run watch"):
            if not deps.redis.set(keys.LOST_RUN_WATCH, "1", nx=True, px=turn_ms):
                return ()
        if isinstance(deps.publish, FairPublisher):
            # Places of killed prefork children, which no pool advertisement expiry frees.
            deps.publish.reap()
        report = heal_lost_runs(
            deps.store,
            deps.redis,
            deps.publish,
            lost_after_s=liveness.ttl_s(deps.lock_ttl_s),
        )
        if report.failed_jobs:
            log.warning(
                "runs of dead workers failed: %s; their sessions requested again: %s",
                ", ".join(report.failed_jobs),
                ", ".join(report.requested) or "(coalesced)",
            )
        return report.failed_jobs

    def _interval_s(self) -> float:
        return timing.lost_run_watch_interval_s(liveness.ttl_s(self._deps().lock_ttl_s))

    def _beat(self) -> float | None:
        if self._stopped:
            return None
        try:
            self.look()
        except OMWorkersError as exc:  # Redis or the store is out: the next turn retries
            log.warning("looking for runs of dead workers failed (%s); retrying", exc)
        except Exception:  # a bug must not stop the watch; the reconciler heals meanwhile
            log.exception("looking for runs of dead workers failed; retrying")
        return None if self._stopped else self._interval_s()


__all__ = ["LostRunWatch"]
