"""The OpenAI-compatible model server the proxy forwards to, over one pooled async httpx client
per API process.

Its answers pass through as they are (status, body, content type); only failing to reach it is
the proxy's own answer: 502 when it cannot be reached or breaks off, 504 when it does not answer
within ``OM_PROXY_TIMEOUT_S``. The upstream key goes in the ``Authorization`` header and nowhere
else: errors name the failure's type, never the request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from om_api.server.errors import ApiError
from om_workers.config import ProxySettings

NOT_CONFIGURED = (
    "the proxy has no upstream: set OM_PROXY_UPSTREAM_URL to an OpenAI-compatible base URL "
    "ending in /v1"
)


def unreachable(exc: httpx.HTTPError) -> ApiError:
    """The proxy's answer to a failure to reach the upstream (502, or 504 on a timeout)."""
    if isinstance(exc, httpx.TimeoutException):
        return ApiError(
            504,
            "upstream_timeout",
            f"the upstream model server did not answer in time "
            f"({type(exc).__name__}); nothing was recorded",
        )
    return ApiError(
        502,
        "upstream_unavailable",
        f"the upstream model server could not be reached "
        f"({type(exc).__name__}); nothing was recorded",
    )


@dataclass
class Upstream:
    """One upstream: where it is, its key, and the pooled client (made on first use, in the
    event loop that serves the requests)."""

    base_url: str
    api_key: str | None
    timeout_s: float
    _client: httpx.AsyncClient | None = None

    @classmethod
    def from_settings(cls, settings: ProxySettings) -> Upstream:
        """The configured upstream; a 404 :class:`ApiError` when none is configured (the
        route is not served here)."""
        if settings.upstream_url is None:
            raise ApiError(404, "proxy_not_configured", NOT_CONFIGURED)
        key = settings.upstream_api_key
        return cls(
            base_url=settings.upstream_url.rstrip("/"),
            api_key=key.get_secret_value() if key is not None else None,
            timeout_s=settings.timeout_s,
        )

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=headers,
                timeout=httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0)),
                limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
            )
        return self._client

    async def open(self, body: dict[str, Any]) -> httpx.Response:
        """Send ``body`` to ``/chat/completions`` and return the answer with its body still
        unread (the caller reads it whole or streams it, then closes it). Raises a 502/504
        :class:`ApiError` when the upstream cannot be reached."""
        client = self._http()
        request = client.build_request("POST", "/chat/completions", json=body)
        try:
            return await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise unreachable(exc) from None

    async def aclose(self) -> None:
        """Close the pooled connections (the app's shutdown)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
