"""The Celery adapter: the app's configuration and broker, the time limits derived from the
settings, the ``om.flush`` and ``om.reconcile`` tasks over the job bodies of
:mod:`om_workers.jobs`, and the worker's start-up (metrics, JSON logs, fair-queue slots).

Start a worker with ``celery -A om_workers.celery.app worker -Q om`` (``om worker`` does).
"""
