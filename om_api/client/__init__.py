"""Python clients of the om HTTP API: :class:`OMClient` (sync) and :class:`AsyncOMClient`.

Installable alone, httpx and pydantic only: ``pip install .`` in a checkout, or
``pip install observational-memory-service`` from the package index; see
:mod:`om_api.client.calls` and :mod:`om_api.client.clients` for the methods and
:mod:`om_api.client.core` for the errors.
"""

from om_api.client.aio import AsyncOMClient
from om_api.client.clients import OMClient
from om_api.client.core import (
    Conflict,
    InvalidRequest,
    InvalidResponse,
    JobTimeout,
    NotFound,
    OMClientError,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
)
from om_core.policy.backoff import RetryPolicy

__all__ = [
    "AsyncOMClient",
    "Conflict",
    "InvalidRequest",
    "InvalidResponse",
    "JobTimeout",
    "NotFound",
    "OMClient",
    "OMClientError",
    "PayloadTooLarge",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "Unauthorized",
    "Unavailable",
]
