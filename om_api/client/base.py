"""What both clients are, written once: their options, and every endpoint as a method.

:class:`ClientBase` holds the key, the admin token, the retry policy and the httpx client, and
offers each endpoint of :mod:`om_api.client.calls` as a method of the same name, signature and
docstring (an :class:`Endpoint`). A method sends its call through the client's own ``send``:
:class:`~om_api.client.clients.OMClient` returns the result, and
:class:`~om_api.client.aio.AsyncOMClient`, whose ``send`` is a coroutine, an awaitable of it.
What a client adds is only how it waits and sends, and the two methods that are more than one
call (``append``, ``wait_for_job``).
"""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, overload

from om_api.client import calls, webhook_calls
from om_api.client.core import DEFAULT_TIMEOUT_S, NDJSON, Call, auth_headers
from om_core.policy.backoff import RetryPolicy

P = ParamSpec("P")
T = TypeVar("T")
TransportT = TypeVar("TransportT")
HttpT = TypeVar("HttpT")


class Sender(Protocol):
    """A client whose ``send`` returns the call's result (:class:`OMClient`)."""

    def send(self, call: Call[T], /) -> T: ...


class AsyncSender(Protocol):
    """A client whose ``send`` is a coroutine (:class:`AsyncOMClient`)."""

    def send(self, call: Call[T], /) -> Coroutine[Any, Any, T]: ...


class Endpoint(Generic[P, T]):
    """A client method sending the call ``build`` describes, with ``build``'s name, signature
    and docstring: on a :class:`Sender` it returns the result, on an :class:`AsyncSender` an
    awaitable of it. On the class it is ``build`` itself (for ``help`` and documentation)."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self._build = build
        # What the method answers is the call's result, not the Call ``build`` returns.
        self._signature = inspect.signature(build).replace(
            return_annotation=inspect.Signature.empty
        )

    def __set_name__(self, owner: type[Any], name: str) -> None:
        # The method's name is the endpoint's, so a client reads like the API it wraps.
        if name != self._build.__name__:
            raise TypeError(f"endpoint {self._build.__name__} bound as {owner.__name__}.{name}")

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Callable[P, Call[T]]: ...

    @overload
    def __get__(
        self, client: AsyncSender, owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    @overload
    def __get__(self, client: Sender, owner: type[Any]) -> Callable[P, T]: ...

    def __get__(self, client: Any, owner: type[Any]) -> Any:
        build = self._build
        if client is None:
            return build

        @functools.wraps(build)
        def method(*args: Any, **kwargs: Any) -> Any:
            return client.send(build(*args, **kwargs))

        method.__signature__ = self._signature  # type: ignore[attr-defined]
        return method


class ClientBase(ABC, Generic[TransportT, HttpT]):
    """``base_url`` is the API root (``http://127.0.0.1:8000``); ``api_key`` the tenant's key;
    ``admin_token`` (``OM_ADMIN_TOKEN``) only for the admin methods; ``timeout_s`` the wait for
    one answer, seconds; ``retry`` the policy of 503s and dropped connections; ``transport``
    httpx's (tests pass a mock)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        admin_token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: TransportT | None = None,
    ) -> None:
        self._api_key = api_key
        self._admin_token = admin_token
        self._retry = retry or RetryPolicy()
        self._http = self._connect(base_url.rstrip("/"), timeout_s, transport)

    @abstractmethod
    def _connect(self, base_url: str, timeout_s: float, transport: TransportT | None) -> HttpT:
        """The httpx client every request of this client goes through."""

    def _request(self, call: Call[Any]) -> dict[str, Any]:
        """httpx's ``request`` arguments for ``call``."""
        headers = auth_headers(self._api_key, self._admin_token, call)
        if call.content is not None:
            return {
                "method": call.method,
                "url": call.path,
                "params": dict(call.params),
                "content": call.content,
                "headers": {**headers, "Content-Type": NDJSON},
            }
        return {
            "method": call.method,
            "url": call.path,
            "params": dict(call.params),
            "json": call.json,
            "headers": headers,
        }

    # Sessions and entries ------------------------------------------------------------------
    create_session = Endpoint(calls.create_session)
    link = Endpoint(calls.link)
    unlink = Endpoint(calls.unlink)
    get_session = Endpoint(calls.get_session)
    list_sessions = Endpoint(calls.list_sessions)
    entries = Endpoint(calls.entries)
    import_session = Endpoint(calls.import_session)
    erase_session = Endpoint(calls.erase_session)
    erase_subject = Endpoint(calls.erase_subject)
    # Flush and jobs ------------------------------------------------------------------------
    flush = Endpoint(calls.flush)
    job = Endpoint(calls.job)
    # Memory reads --------------------------------------------------------------------------
    context = Endpoint(calls.context)
    recall = Endpoint(calls.recall)
    messages = Endpoint(calls.messages)
    status = Endpoint(calls.status)
    view = Endpoint(calls.view)
    search = Endpoint(calls.search)
    compact = Endpoint(calls.compact)
    # Scopes and revocations ----------------------------------------------------------------
    open_scope = Endpoint(calls.open_scope)
    close_scope = Endpoint(calls.close_scope)
    enter_scope = Endpoint(calls.enter_scope)
    leave_scope = Endpoint(calls.leave_scope)
    bind = Endpoint(calls.bind)
    unbind = Endpoint(calls.unbind)
    grant = Endpoint(calls.grant)
    revoke = Endpoint(calls.revoke)
    revoke_entries = Endpoint(calls.revoke_entries)
    # Operations ----------------------------------------------------------------------------
    healthz = Endpoint(calls.healthz)
    readyz = Endpoint(calls.readyz)
    metrics = Endpoint(calls.metrics)
    create_tenant = Endpoint(calls.create_tenant)
    create_key = Endpoint(calls.create_key)
    list_keys = Endpoint(calls.list_keys)
    revoke_key = Endpoint(calls.revoke_key)
    # Webhooks (admin) ----------------------------------------------------------------------
    add_webhook = Endpoint(webhook_calls.add_webhook)
    list_webhooks = Endpoint(webhook_calls.list_webhooks)
    remove_webhook = Endpoint(webhook_calls.remove_webhook)
    webhook_deliveries = Endpoint(webhook_calls.webhook_deliveries)
    redeliver_webhook = Endpoint(webhook_calls.redeliver_webhook)
