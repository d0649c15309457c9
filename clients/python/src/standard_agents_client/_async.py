"""The asynchronous client, on ``httpx.AsyncClient`` (asyncio or trio)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

import anyio
import anyio.to_thread
import httpx

from standard_agents_client._call import Call, Download, Upload, follow
from standard_agents_client._config import DEFAULT_TIMEOUT_S, request_options, settings
from standard_agents_client._operations import access
from standard_agents_client._resources import Async, Resources
from standard_agents_client._streams import Follow, SseDecoder
from standard_agents_client.errors import ApiConnectionError, ApiError, ApiTimeout, api_error
from standard_agents_client.pagination import Page
from standard_agents_client.types import Event, Me, WsTicket

T = TypeVar("T")

UPLOAD_CHUNK = 256 * 1024


class AsyncClient(Resources[Async]):
    """An asynchronous client of the Standard Agents Platform API: the same resources and
    arguments as :class:`~standard_agents_client.Client`, each call awaited
    (``await client.threads.create(...)``) and each iterator async
    (``async for event in client.events.follow(...)``).

    ``transport`` replaces httpx's own, or ``http_client`` the whole ``httpx.AsyncClient``
    (a client passed in is not closed by this one). Use it as an async context manager,
    or await :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._settings = settings(base_url, api_key, timeout, headers)
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(transport=transport)
        self._attach_resources()

    @property
    def base_url(self) -> str:
        """The server's URL (without ``/api/v1``)."""
        return self._settings.base_url

    async def me(self) -> Me:
        """The caller: its tenant, its role and how it authenticated."""
        return await self._send(access.me())

    async def ws_ticket(self) -> WsTicket:
        """A one-time WebSocket ticket (open a socket with ``?ticket=`` within 30 s)."""
        return await self._send(access.ws_ticket())

    async def next_page(self, page: Page[T]) -> Page[T] | None:
        """The page after ``page``, or None when it is the last."""
        if page.next is None:
            return None
        found: Page[T] = await self._send(follow(page.next))
        return found

    async def previous_page(self, page: Page[T]) -> Page[T] | None:
        """The page before ``page``, or None when it is the first."""
        if page.previous is None:
            return None
        found: Page[T] = await self._send(follow(page.previous))
        return found

    async def aclose(self) -> None:
        """Release the client's connections (not those of an ``http_client`` passed in)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    # Sending: what the resources' methods call ------------------------------------------------

    async def _send(self, call: Call[T]) -> T:
        async with self._response(call) as response:
            return call.parse(response)

    async def _items(self, call: Call[Page[T]]) -> AsyncIterator[T]:
        first: Page[T] = await self._send(call)
        page: Page[T] | None = first
        while page is not None:
            for item in page.results:
                yield item
            page = await self.next_page(page)

    async def _download(self, download: Download) -> int:
        async with self._response(download.call, stream=True) as response:
            with contextlib.ExitStack() as opened:
                destination = download.destination
                target = (
                    opened.enter_context(Path(destination).open("wb"))
                    if isinstance(destination, str | os.PathLike)
                    else destination
                )
                written = 0
                try:
                    async for chunk in response.aiter_bytes():
                        await anyio.to_thread.run_sync(target.write, chunk)
                        written += len(chunk)
                except httpx.TransportError as error:
                    raise ApiConnectionError(f"the download dropped: {error!r}") from error
                return written

    async def _follow(self, state: Follow) -> AsyncGenerator[Event, None]:
        """Run a followed stream (see ``_streams.Follow``): connect, pass its events on,
        connect again after a drop, until it ends."""
        while not state.ended():
            decoder: SseDecoder | None = None
            try:
                async with self._response(state.request(), stream=True) as response:
                    if response.status_code == 204:
                        state.no_content()
                        return
                    decoder = SseDecoder()
                    async for line in response.aiter_lines():
                        frame = decoder.feed(line)
                        event = state.admit(frame) if frame is not None else None
                        if event is not None:
                            yield event
                        if state.ended():
                            return
                    delay = state.closed(decoder)
            except httpx.TransportError as error:
                delay = state.dropped(error, decoder)
            except ApiConnectionError as error:
                delay = state.dropped(error, decoder)
            except ApiError as error:
                delay = state.refused(error)
            if not state.ended():
                await anyio.sleep(delay)

    @contextlib.asynccontextmanager
    async def _response(
        self, call: Call[Any], *, stream: bool = False
    ) -> AsyncIterator[httpx.Response]:
        """The answer to ``call``, read (left unread when ``stream``); an error answer is
        raised as its ApiError, a failed request as ApiConnectionError."""
        async with contextlib.AsyncExitStack() as opened:
            request = self._http.build_request(
                **request_options(call, self._settings),
                content=_content(call.content, opened),
                files=_files(call, opened),
            )
            try:
                response = await self._http.send(request, stream=True)
            except httpx.TransportError as error:
                raise _unanswered(call, error) from error
            try:
                if response.status_code >= 400 or not stream:
                    try:
                        await response.aread()
                    except httpx.TransportError as error:
                        raise _unanswered(call, error) from error
                if response.status_code >= 400:
                    raise api_error(response)
                yield response
            finally:
                await response.aclose()


def _unanswered(call: Call[Any], error: httpx.TransportError) -> ApiConnectionError:
    kind = ApiTimeout if isinstance(error, httpx.TimeoutException) else ApiConnectionError
    return kind(f"{call.method} {call.path}: {error!r}")


def _content(
    upload: Upload | None, opened: contextlib.AsyncExitStack
) -> bytes | AsyncIterator[bytes] | None:
    """A body httpx's async client can send: bytes, or a file read in chunks off the event
    loop."""
    if upload is None:
        return None
    if isinstance(upload.source, bytes):
        return upload.source
    handle = (
        opened.enter_context(upload.source.open("rb"))
        if isinstance(upload.source, Path)
        else upload.source
    )
    return _chunks(handle)


async def _chunks(handle: IO[bytes]) -> AsyncIterator[bytes]:
    while chunk := await anyio.to_thread.run_sync(handle.read, UPLOAD_CHUNK):
        yield chunk


def _files(call: Call[Any], opened: contextlib.AsyncExitStack) -> dict[str, Any] | None:
    """A multipart body's files: httpx reads them itself (in chunks, as it sends)."""
    if call.files is None:
        return None
    files: dict[str, Any] = {}
    for name, (filename, upload, mime_type) in call.files.items():
        source = upload.source
        if isinstance(source, Path):
            source = opened.enter_context(source.open("rb"))
        files[name] = (filename, source, mime_type)
    return files
