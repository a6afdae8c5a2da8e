"""The flush and reconcile jobs and their Celery adapters.

:mod:`.flush` holds a flush from request to finished job, pure of Celery; :mod:`.reconcile`
the periodic pass that heals lost Redis state; :mod:`.celery_app` and :mod:`.tasks` only adapt
both to Celery (``om.flush``, ``om.reconcile``).
"""
