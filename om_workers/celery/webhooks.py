"""The Celery task ``om.webhook(delivery_id)``: one attempt of a webhook delivery
(:func:`om_workers.jobs.webhooks.attempt_delivery`), and publishing what a job's end wrote.

A failed attempt is not retried with ``self.retry``: its next attempt is a new message with a
countdown when the wait is short (:data:`MAX_COUNTDOWN_S`; on Redis a countdown waits unacked
in the worker, against the visibility timeout), else the reconciler publishes it once due. A
message that arrives early, twice, or after another worker's attempt finds nothing to claim
and does nothing.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, Final

import httpx

from om_workers.celery.config import QUEUE
from om_workers.config import get_settings
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.webhooks import AttemptResult, WebhookPolicy, attempt_delivery
from om_workers.logs import log_context
from om_workers.store import SqlStore

log = logging.getLogger(__name__)

WEBHOOK_TASK: Final = "om.webhook"
MAX_COUNTDOWN_S: Final = 60.0
"""Longest wait before a retry that rides on a countdown message; longer waits are left to
the reconciler (every ``OM_RECONCILE_INTERVAL_S``)."""

PublishWebhook = Callable[[str, float], None]
"""Publishes ``om.webhook`` for a delivery id, after a countdown in seconds (0: now)."""


def webhook_publisher(app: Any) -> PublishWebhook:
    """Sends ``om.webhook`` through ``app``."""

    def publish(delivery_id: str, countdown_s: float = 0.0) -> None:
        countdown = countdown_s if countdown_s > 0 else None
        app.send_task(WEBHOOK_TASK, args=[delivery_id], queue=QUEUE, countdown=countdown)

    return publish


def policy_from_settings(secrets: tuple[str, ...]) -> WebhookPolicy:
    """The attempt policy of this process's ``OM_WEBHOOK_*`` settings."""
    settings = get_settings().webhooks
    return WebhookPolicy(
        timeout_s=settings.timeout_s,
        max_attempts=settings.max_attempts,
        backoff_base_s=settings.backoff_base_s,
        backoff_cap_s=settings.backoff_cap_s,
        allow_private=settings.allow_private,
        secrets=secrets,
    )


@lru_cache(maxsize=1)
def _http() -> httpx.Client:
    # One pooled client per worker process; it is thread-safe and holds no credentials.
    return httpx.Client(follow_redirects=False)


def webhook_task(deps: FlushDeps, delivery_id: str, publish: PublishWebhook) -> str:
    """``om.webhook``: one attempt; a retry due within :data:`MAX_COUNTDOWN_S` is published
    with that countdown. Its outcome (and status), for Flower."""
    with log_context(job_id=delivery_id):
        result = attempt_delivery(
            deps.store,
            _http(),
            delivery_id,
            policy_from_settings(deps.secrets),
            draw=random.random(),
        )
        _schedule(result, publish)
    return result.outcome if result.status is None else f"{result.outcome}: {result.status}"


def _schedule(result: AttemptResult, publish: PublishWebhook) -> None:
    if result.retry_in_s is None or result.retry_in_s > MAX_COUNTDOWN_S:
        return
    try:
        publish(result.delivery_id, result.retry_in_s)
    except Exception:  # the reconciler publishes it once due
        log.warning("publishing the retry of webhook %s failed", result.delivery_id)


def announce(
    store: SqlStore,
    source_id: str | None,
    publish: PublishWebhook,
    written: Sequence[str] | None = None,
) -> None:
    """Publish the pending deliveries a job (``source_id``) wrote as it ended: ``written``
    when its finish said which (none: nothing to read back), else those the store holds for
    it. Never raises: what is not published now is published by the reconciler once due."""
    if source_id is None:
        return
    try:
        found = store.webhooks.pending_of(source_id) if written is None else written
        for delivery_id in found:
            publish(delivery_id, 0.0)
    except Exception:
        log.warning("publishing the webhooks of %s failed; the reconciler sends them", source_id)


def register_webhooks(app: Any, deps: Callable[[], FlushDeps]) -> None:
    """Register ``om.webhook`` on ``app``."""
    publish = webhook_publisher(app)

    def webhook(delivery_id: str) -> str:
        return webhook_task(deps(), delivery_id, publish)

    app.task(name=WEBHOOK_TASK)(webhook)


__all__ = [
    "MAX_COUNTDOWN_S",
    "WEBHOOK_TASK",
    "announce",
    "policy_from_settings",
    "register_webhooks",
    "webhook_publisher",
    "webhook_task",
]
