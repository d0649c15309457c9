"""The synchronous client, on ``httpx.Client``."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

import httpx

from standard_agents_client._call import Call, Download, Upload, follow
from standard_agents_client._config import DEFAULT_TIMEOUT_S, request_options, settings
from standard_agents_client._operations import access
from standard_agents_client._resources import Resources, Sync
from standard_agents_client._streams import Follow, SseDecoder
from standard_agents_client.errors import ApiConnectionError, ApiError, ApiTimeout, api_error
from standard_agents_client.pagination import Page
from standard_agents_client.types import Event, Me, WsTicket

T = TypeVar("T")


class Client(Resources[Sync]):
    """A synchronous client of the Standard Agents Platform API.

    ``base_url`` is the server's (``http://127.0.0.1:8000``) and ``api_key`` a key of the
    tenant (``sap_…``); when not given they come from the environment variables
    ``AGENTS_API_URL`` and ``AGENTS_API_KEY``. ``timeout`` is in seconds (calls that wait
    on the server, like a turn's wait, wait longer). ``headers`` are sent with every
    request. ``transport`` replaces httpx's own, or ``http_client`` the whole
    ``httpx.Client`` (a client passed in is not closed by this one).

    The operations are grouped by resource: ``client.threads.create(...)``,
    ``client.turns.submit_and_wait(...)``, ``client.events.follow(...)``. Use the client as
    a context manager, or call :meth:`close`, to release its connections.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._settings = settings(base_url, api_key, timeout, headers)
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(transport=transport)
        self._attach_resources()

    @property
    def base_url(self) -> str:
        """The server's URL (without ``/api/v1``)."""
        return self._settings.base_url

    def me(self) -> Me:
        """The caller: its tenant, its role and how it authenticated."""
        return self._send(access.me())

    def ws_ticket(self) -> WsTicket:
        """A one-time WebSocket ticket (open a socket with ``?ticket=`` within 30 s)."""
        return self._send(access.ws_ticket())

    def next_page(self, page: Page[T]) -> Page[T] | None:
        """The page after ``page``, or None when it is the last."""
        return None if page.next is None else self._send(follow(page.next))

    def previous_page(self, page: Page[T]) -> Page[T] | None:
        """The page before ``page``, or None when it is the first."""
        return None if page.previous is None else self._send(follow(page.previous))

    def close(self) -> None:
        """Release the client's connections (not those of an ``http_client`` passed in)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # Sending: what the resources' methods call ------------------------------------------------

    def _send(self, call: Call[T]) -> T:
        with self._response(call) as response:
            return call.parse(response)

    def _items(self, call: Call[Page[T]]) -> Iterator[T]:
        page: Page[T] | None = self._send(call)
        while page is not None:
            yield from page.results
            page = self.next_page(page)

    def _download(self, download: Download) -> int:
        with (
            self._response(download.call, stream=True) as response,
            contextlib.ExitStack() as opened,
        ):
            destination = download.destination
            target = (
                opened.enter_context(Path(destination).open("wb"))
                if isinstance(destination, str | os.PathLike)
                else destination
            )
            written = 0
            try:
                for chunk in response.iter_bytes():
                    target.write(chunk)
                    written += len(chunk)
            except httpx.TransportError as error:
                raise ApiConnectionError(f"the download dropped: {error!r}") from error
            return written

    def _follow(self, state: Follow) -> Generator[Event, None, None]:
        """Run a followed stream (see ``_streams.Follow``): connect, pass its events on,
        connect again after a drop, until it ends."""
        while not state.ended():
            decoder: SseDecoder | None = None
            try:
                with self._response(state.request(), stream=True) as response:
                    if response.status_code == 204:
                        state.no_content()
                        return
                    decoder = SseDecoder()
                    for line in response.iter_lines():
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
                time.sleep(delay)

    @contextlib.contextmanager
    def _response(self, call: Call[Any], *, stream: bool = False) -> Iterator[httpx.Response]:
        """The answer to ``call``, read (left unread when ``stream``); an error answer is
        raised as its ApiError, a failed request as ApiConnectionError."""
        with contextlib.ExitStack() as opened:
            request = self._http.build_request(
                **request_options(call, self._settings),
                content=_content(call.content, opened),
                files=_files(call, opened),
            )
            try:
                response = self._http.send(request, stream=True)
            except httpx.TransportError as error:
                raise _unanswered(call, error) from error
            try:
                if response.status_code >= 400 or not stream:
                    try:
                        response.read()
                    except httpx.TransportError as error:
                        raise _unanswered(call, error) from error
                if response.status_code >= 400:
                    raise api_error(response)
                yield response
            finally:
                response.close()


def _unanswered(call: Call[Any], error: httpx.TransportError) -> ApiConnectionError:
    kind = ApiTimeout if isinstance(error, httpx.TimeoutException) else ApiConnectionError
    return kind(f"{call.method} {call.path}: {error!r}")


def _content(upload: Upload | None, opened: contextlib.ExitStack) -> bytes | IO[bytes] | None:
    if upload is None:
        return None
    if isinstance(upload.source, Path):
        return opened.enter_context(upload.source.open("rb"))
    return upload.source


def _files(call: Call[Any], opened: contextlib.ExitStack) -> dict[str, Any] | None:
    if call.files is None:
        return None
    return {
        name: (filename, _content(upload, opened), mime_type)
        for name, (filename, upload, mime_type) in call.files.items()
    }
