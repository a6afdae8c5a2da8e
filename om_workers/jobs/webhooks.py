"""One webhook delivery attempt (what ``om.webhook`` runs), pure of Celery.

An attempt claims the delivery (:meth:`~om_workers.store.webhooks.WebhookService.claim`:
only a due, pending delivery is sent, by one worker at a time, for at most the attempt's
timeout plus a margin), checks the URL again (:func:`~om_workers.jobs.webhook_url.check_url`),
POSTs the stored payload with fresh Standard Webhooks headers (same ``webhook-id`` every time,
the attempt's own timestamp and signature) and records the outcome: a 2xx is delivered;
anything else is retried after :func:`~om_core.policy.webhooks.retry_delay_s` until
``max_attempts``, then failed. Redirects are not followed (a 3xx is a failure).

What is stored and logged about a failure is the status, or the error's type and its message
with every secret replaced; never the payload or the endpoint's secret.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Literal

import httpx

from om_core.errors import InvalidWebhookUrlError
from om_core.policy.redaction import redact
from om_core.policy.webhooks import retry_delay_s, signed_headers
from om_workers.jobs.webhook_url import check_url
from om_workers.store import SqlStore

log = logging.getLogger(__name__)

LEASE_MARGIN_S = 5.0
"""Held beyond the attempt's timeout before a claimed attempt counts as lost (its worker died)
and the reconciler may send the delivery again."""

AttemptOutcome = Literal["delivered", "retry", "failed", "not_due"]


@dataclass(frozen=True)
class WebhookPolicy:
    """How attempts are made: each one's ``timeout_s``, ``max_attempts`` of one delivery,
    the retry backoff (``backoff_base_s`` doubling to ``backoff_cap_s``), whether private
    addresses may be called, and the ``secrets`` redacted from stored errors."""

    timeout_s: float = 10.0
    max_attempts: int = 12
    backoff_base_s: float = 5.0
    backoff_cap_s: float = 3600.0
    allow_private: bool = False
    secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class AttemptResult:
    """What one call did: ``outcome``, the HTTP ``status`` when there was an answer, and for
    ``retry`` the seconds until the delivery is due again."""

    delivery_id: str
    outcome: AttemptOutcome
    status: int | None = None
    retry_in_s: float | None = None


def attempt_delivery(
    store: SqlStore,
    http: httpx.Client,
    delivery_id: str,
    policy: WebhookPolicy,
    *,
    draw: float = 0.0,
) -> AttemptResult:
    """Make the delivery's next attempt when it is due (see the module docstring); ``draw``
    in ``[0, 1)`` jitters the retry. Raises only the store's errors (the claim or record
    could not be written: the reconciler sends the delivery again once it is due)."""
    claimed = store.webhooks.claim(delivery_id, policy.timeout_s + LEASE_MARGIN_S)
    if claimed is None:
        return AttemptResult(delivery_id, "not_due")
    delivery = claimed.delivery
    status, error = _send(http, claimed.url, claimed.secret, delivery.id, delivery.payload, policy)
    delivered = status is not None and 200 <= status < 300
    retry_in_s = None
    if not delivered:
        retry_in_s = retry_delay_s(
            delivery.attempts,
            max_attempts=policy.max_attempts,
            base_s=policy.backoff_base_s,
            cap_s=policy.backoff_cap_s,
            draw=draw,
        )
        log.warning(
            "webhook %s attempt %d to endpoint %s: %s",
            delivery.id,
            delivery.attempts,
            delivery.endpoint_id,
            error if error is not None else f"status {status}",
        )
    store.webhooks.record(
        delivery.id,
        delivery.attempts,
        status=status,
        error=error,
        retry_in_s=retry_in_s,
        delivered=delivered,
    )
    if delivered:
        return AttemptResult(delivery.id, "delivered", status)
    outcome: AttemptOutcome = "retry" if retry_in_s is not None else "failed"
    return AttemptResult(delivery.id, outcome, status, retry_in_s)


def _send(
    http: httpx.Client, url: str, secret: str, message_id: str, payload: str, policy: WebhookPolicy
) -> tuple[int | None, str | None]:
    """POST one attempt: ``(status, None)`` with an answer, ``(None, why)`` without one."""
    try:
        check_url(url, allow_private=policy.allow_private)
    except InvalidWebhookUrlError as exc:
        return None, f"refused: {exc}"
    body = payload.encode()
    headers = signed_headers(secret, message_id, int(time.time()), body)
    try:
        answer = http.post(
            url, content=body, headers=headers, timeout=policy.timeout_s, follow_redirects=False
        )
    except httpx.HTTPError as exc:
        why = redact(f"{type(exc).__name__}: {exc}", (*policy.secrets, secret))
        return None, why
    error = None if 200 <= answer.status_code < 300 else f"HTTP {answer.status_code}"
    return answer.status_code, error


__all__ = ["LEASE_MARGIN_S", "AttemptResult", "WebhookPolicy", "attempt_delivery"]
