"""Python clients of the om HTTP API: :class:`OMClient` (sync) and :class:`AsyncOMClient`.

Installable alone (``pip install observational-memory``: httpx and pydantic only); see
:mod:`om_api.client.clients` for the methods and :mod:`om_api.client.core` for the errors.
"""

from om_api.client.clients import (
    AsyncOMClient,
    Conflict,
    InvalidRequest,
    InvalidResponse,
    JobTimeout,
    NotFound,
    OMClient,
    OMClientError,
    PayloadTooLarge,
    RateLimited,
    RetryPolicy,
    ServerError,
    Unauthorized,
    Unavailable,
)

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
