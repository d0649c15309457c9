"""HTTP to a tenant's remote connections (MCP servers, A2A agents), always through the egress
guard: the bridge that lets an SDK's async HTTP client send through the guard, the error every
failed contact becomes, and OAuth 2.1 client-credentials tokens.

The egress guard builds a synchronous ``httpx2.Client`` (:func:`common.egress.egress_client`)
that judges and pins every address it connects to. The ``mcp`` SDK drives an
``httpx2.AsyncClient`` and the ``a2a-sdk`` an ``httpx.AsyncClient``; :func:`egress_transport`
gives either an async transport that hands each request to the guarded client in a worker
thread and streams the answer back, so no byte leaves except through the guard, and keeps a
refusal to be reported as such (an SDK would fold it into a generic connection error).
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final

import anyio
import httpx2

from common.egress import EgressRefused, egress_client, egress_refusal

CONNECT_TIMEOUT_S: Final = 10.0


class RemoteUnavailable(Exception):
    """A remote connection could not be asked (refused by the egress guard, unreachable, timed
    out, an answer in no protocol we speak, credentials the other side refused). ``message``
    names the cause and never a secret; ``code`` is the tool result's error code."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True)
class Endpoint:
    """Where a remote connection is and the headers that authenticate to it (secrets in
    clear: never log, store or show an Endpoint)."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)


class EgressBridge:
    """What an async transport of ``library`` (``httpx`` or ``httpx2``) saw of its requests:
    the guard's refusal and a 401/403, if either happened."""

    def __init__(self) -> None:
        self.refused: EgressRefused | None = None
        self.unauthorized: int | None = None


def egress_transport(library: ModuleType, *, timeout: float) -> tuple[Any, EgressBridge]:
    """An async transport of ``library`` (``httpx`` or ``httpx2``: the two share their API)
    whose every request goes through a guarded client with ``timeout``, and the record of
    what happened to them."""
    guarded = egress_client(timeout=httpx2.Timeout(timeout, connect=CONNECT_TIMEOUT_S))
    seen = EgressBridge()

    class Threaded(library.AsyncByteStream):  # type: ignore[name-defined]
        """A guarded response's body, read chunk by chunk in worker threads."""

        def __init__(self, response: httpx2.Response) -> None:
            self._response = response
            self._chunks = response.iter_raw()

        async def __aiter__(self) -> AsyncIterator[bytes]:
            while True:
                # A cancelled read is abandoned (its thread ends when aclose closes the body).
                chunk = await anyio.to_thread.run_sync(
                    next, self._chunks, None, abandon_on_cancel=True
                )
                if chunk is None:
                    return
                yield chunk

        async def aclose(self) -> None:
            await anyio.to_thread.run_sync(self._response.close)

    class Transport(library.AsyncBaseTransport):  # type: ignore[name-defined]
        async def handle_async_request(self, request: Any) -> Any:
            body = await request.aread()
            outgoing = httpx2.Request(
                request.method, str(request.url), headers=list(request.headers.multi_items()),
                content=body,
            )  # fmt: skip
            try:
                response = await anyio.to_thread.run_sync(_send, outgoing)
            except Exception as error:
                seen.refused = seen.refused or egress_refusal(error)
                if library is httpx2:
                    raise
                raise library.ConnectError(str(error), request=request) from error
            if response.status_code in (401, 403):
                seen.unauthorized = response.status_code
            return library.Response(
                response.status_code, headers=list(response.headers.multi_items()),
                stream=Threaded(response), request=request,
            )  # fmt: skip

        async def aclose(self) -> None:
            await anyio.to_thread.run_sync(guarded.close)

    def _send(request: httpx2.Request) -> httpx2.Response:
        return guarded.send(request, stream=True)

    return Transport(), seen


def refusal_in(error: BaseException) -> EgressRefused | None:
    """The egress refusal behind ``error``, looking into causes and exception groups too."""
    found = egress_refusal(error)
    if found is not None:
        return found
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = refusal_in(inner)
            if found is not None:
                return found
    if error.__cause__ is not None and error.__cause__ is not error:
        return refusal_in(error.__cause__)
    return None


def describe(error: BaseException) -> str:
    """What went wrong, from the innermost error of a group (the SDKs' task groups wrap)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    response = getattr(error, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        if status in (401, 403):
            return f"the server refused the credentials (HTTP {status})"
        return f"the server answered HTTP {status}"
    text = str(error).strip() or type(error).__name__
    return f"{type(error).__name__}: {text}"[:500]


def failure(
    error: BaseException, seen: EgressBridge, *, protocol: str, timeout: float, started: float
) -> RemoteUnavailable:
    """The :class:`RemoteUnavailable` a failed contact over ``protocol`` (``mcp``, ``a2a``)
    becomes: the guard's refusal first, then credentials refused, then a timeout."""
    refused = seen.refused or refusal_in(error)
    if refused is not None:
        return RemoteUnavailable(refused.message, code="egress_refused")
    if seen.unauthorized is not None:
        return RemoteUnavailable(
            f"the server refused the credentials (HTTP {seen.unauthorized})",
            code=f"{protocol}_unauthorized",
        )
    if isinstance(error, TimeoutError) or time.monotonic() - started >= timeout:
        return RemoteUnavailable(f"no answer within {timeout:g} s", code=f"{protocol}_timeout")
    return RemoteUnavailable(describe(error), code=f"{protocol}_unavailable")


# OAuth 2.1 client credentials ------------------------------------------------------------------

TOKEN_MARGIN_S: Final = 30.0
_tokens: dict[tuple[str, str], tuple[str, float]] = {}
_tokens_lock = threading.Lock()


def oauth_token(
    *, cache_key: str, token_url: str, client_id: str, client_secret: str, scopes: str,
    timeout: float,
) -> str:  # fmt: skip
    """An access token from ``token_url`` by the client-credentials grant (RFC 6749 §4.4,
    client authentication by HTTP Basic), through the egress guard; kept in this process
    until shortly before it expires. ``cache_key`` changes whenever the credentials do."""
    key = (cache_key, scopes)
    with _tokens_lock:
        cached = _tokens.get(key)
    if cached is not None and cached[1] > time.monotonic():
        return cached[0]
    form = {"grant_type": "client_credentials", **({"scope": scopes} if scopes else {})}
    unavailable = "oauth_unavailable"
    try:
        with egress_client(timeout=timeout) as http:
            response = http.post(token_url, data=form, auth=(client_id, client_secret))
    except httpx2.HTTPError as error:
        refused = egress_refusal(error)
        if refused is not None:
            raise RemoteUnavailable(
                f"token URL: {refused.message}", code="egress_refused"
            ) from None
        raise RemoteUnavailable(f"the token URL could not be reached: {describe(error)}",
                                code=unavailable) from None  # fmt: skip
    if response.status_code != 200:
        raise RemoteUnavailable(f"the token URL refused the client credentials (HTTP "
                                f"{response.status_code})", code=unavailable)  # fmt: skip
    try:
        body = response.json()
        token = body["access_token"]
        expires_in = float(body.get("expires_in") or 3600)
    except (ValueError, KeyError, TypeError):
        raise RemoteUnavailable("the token URL's answer holds no access_token",
                                code=unavailable) from None  # fmt: skip
    if not isinstance(token, str) or not token:
        raise RemoteUnavailable("the token URL's answer holds no access_token", code=unavailable)
    with _tokens_lock:
        if len(_tokens) > 1000:
            _tokens.clear()
        _tokens[key] = (token, time.monotonic() + max(expires_in - TOKEN_MARGIN_S, 0.0))
    return token


def oauth_forget(cache_key: str) -> None:
    """Drop the tokens kept for ``cache_key`` (after the server refused one)."""
    with _tokens_lock:
        for key in [key for key in _tokens if key[0] == cache_key]:
            del _tokens[key]
