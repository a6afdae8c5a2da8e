"""The job bodies, pure of Celery: accepting a flush request (:mod:`.requests`), running a
flush job from its lock to its finished row (:mod:`.flush`, with its one handle on the row in
:mod:`.running`), and the reconciler's pass that heals lost Redis state (:mod:`.reconcile`).
:mod:`om_workers.celery` adapts them to Celery (``om.flush``, ``om.reconcile``)."""
