"""Server-Sent Events: reading the frames, and following a stream across dropped
connections.

A thread's events (``GET /threads/{id}/events`` with ``Accept: text/event-stream``) carry
their ``sequence`` as the frame's ``id``; a follower keeps the last one it passed on and,
when the connection drops, asks again from there (``?after=`` and ``Last-Event-ID``), so
the caller sees every stored event once, in order. A turn's stream
(``GET /turns/{id}/stream``) starts again at the turn's first event on every connection;
the follower skips what it already passed on. The sync and async clients run the same
:class:`Follow`; only their I/O differs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from standard_agents_client._call import Call
from standard_agents_client.errors import (
    ApiConnectionError,
    ApiError,
    ServerError,
    StreamRevoked,
    UnexpectedAnswer,
)
from standard_agents_client.types import Event

# The events after which a turn's stream ends (it ends there on the server too).
TURN_END_EVENTS = frozenset({"turn.completed", "turn.failed", "turn.cancelled"})
THREAD_END_EVENT = "thread.terminated"
# Streams send a keep-alive comment after 15 quiet seconds: longer without a byte is a
# dead connection.
STREAM_READ_TIMEOUT_S = 45.0
DEFAULT_RECONNECT_DELAY_S = 1.0
MAX_RECONNECT_DELAY_S = 30.0


@dataclass(frozen=True)
class ServerSentEvent:
    """One frame: its ``event`` name, ``data`` and ``id`` (None when the frame had none)."""

    event: str
    data: str
    id: str | None = None


class SseDecoder:
    """Turns the lines of an event stream into frames (the HTML standard's parsing, with
    ``id`` kept per frame). ``retry_ms`` is the reconnection delay the server last asked
    for."""

    def __init__(self) -> None:
        self.retry_ms: int | None = None
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> ServerSentEvent | None:
        """Read one line (without its end); a blank line ends a frame, which is returned."""
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: the server's keep-alive
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        frame = None
        if self._data:
            frame = ServerSentEvent(self._event or "message", "\n".join(self._data), self._id)
        self._event, self._data, self._id = "", [], None
        return frame


class Follow:
    """Where a followed stream stands: the last ``sequence`` passed on (``after``), whether
    it has ended, and how long to wait before connecting again.

    ``request(after)`` builds the request for a connection. ``ends_with(event)`` says
    whether an event is the stream's last. ``resume_on_close``: whether a stream the
    server closed (without its last event) is asked again — a thread's is (the server may
    have restarted), a turn's is not (the server closes it once the turn ended).
    ``max_reconnects`` caps the connections in a row that fail without an event (None:
    no cap); ``reconnect_delay`` overrides the delay the server asks for.
    """

    def __init__(
        self,
        request: Callable[[int], Call[None]],
        *,
        after: int,
        ends_with: Callable[[Event], bool],
        resume_on_close: bool,
        max_reconnects: int | None = None,
        reconnect_delay: float | None = None,
    ) -> None:
        self.after = after
        self._finished = False
        self._request = request
        self._ends_with = ends_with
        self._resume_on_close = resume_on_close
        self._max_reconnects = max_reconnects
        self._reconnect_delay = reconnect_delay
        self._server_delay: float | None = None
        self._failures = 0

    def ended(self) -> bool:
        """Whether the stream has ended: nothing more will be asked for."""
        return self._finished

    def request(self) -> Call[None]:
        """The request of the next connection (from the last sequence passed on)."""
        return self._request(self.after)

    def admit(self, frame: ServerSentEvent) -> Event | None:
        """The event a frame holds, or None when it was passed on already. Raises
        StreamRevoked when the stream's credentials went away."""
        if frame.event == "revoked":
            self._finished = True
            raise StreamRevoked(401, "unauthenticated", _revoked_message(frame.data), headers={})
        try:
            event: Event = json.loads(frame.data)
        except ValueError:
            raise UnexpectedAnswer(f"an event that is not JSON: {frame.data[:200]!r}") from None
        sequence = event.get("sequence")
        if sequence is not None:
            if sequence <= self.after:
                return None
            self.after = sequence
        self._failures = 0
        if self._ends_with(event):
            self._finished = True
        return event

    def no_content(self) -> None:
        """The server answered 204: nothing more will come (a terminated thread)."""
        self._finished = True

    def closed(self, decoder: SseDecoder) -> float:
        """The server ended the stream: the delay before the next connection (the stream
        is finished when it does not resume)."""
        self._remember(decoder)
        if not self._resume_on_close:
            self._finished = True
        return self._delay()

    def dropped(self, error: Exception, decoder: SseDecoder | None) -> float:
        """The connection failed or dropped: the delay before the next one, or
        ApiConnectionError once ``max_reconnects`` connections in a row failed."""
        if decoder is not None:
            self._remember(decoder)
        if isinstance(error, ApiConnectionError):
            self._fail(error, error.__cause__)
        else:
            self._fail(ApiConnectionError(f"the event stream dropped: {error!r}"), error)
        return self._delay()

    def refused(self, error: ApiError) -> float:
        """The server answered an error: raised, unless it is a server fault worth
        retrying (5xx, 429), then the delay before the next connection."""
        if not isinstance(error, ServerError) and error.status != 429:
            self._finished = True
            raise error
        self._fail(error, None)
        return max(self._delay(), error.retry_after or 0.0)

    def _fail(self, error: Exception, cause: BaseException | None) -> None:
        self._failures += 1
        if self._max_reconnects is not None and self._failures > self._max_reconnects:
            self._finished = True
            raise error from cause

    def _remember(self, decoder: SseDecoder) -> None:
        if decoder.retry_ms is not None:
            self._server_delay = decoder.retry_ms / 1000

    def _delay(self) -> float:
        base = self._reconnect_delay
        if base is None:
            base = (
                self._server_delay if self._server_delay is not None else DEFAULT_RECONNECT_DELAY_S
            )
        if self._failures <= 1:
            return base
        return min(base * 2.0 ** (self._failures - 1), MAX_RECONNECT_DELAY_S)


def _revoked_message(data: str) -> str:
    try:
        return str(json.loads(data)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return "the credentials of this stream were revoked or expired"


def thread_follow(
    request: Callable[[int], Call[None]],
    *,
    after: int,
    max_reconnects: int | None,
    reconnect_delay: float | None,
) -> Follow:
    """A thread's events: followed until ``thread.terminated``, resumed across drops."""
    return Follow(
        request, after=after, ends_with=lambda event: event.get("type") == THREAD_END_EVENT,
        resume_on_close=True, max_reconnects=max_reconnects, reconnect_delay=reconnect_delay,
    )  # fmt: skip


def turn_follow(
    request: Callable[[int], Call[None]],
    *,
    turn_id: str,
    max_reconnects: int | None,
    reconnect_delay: float | None,
) -> Follow:
    """A turn's events: until the event that ends it; a drop reconnects and skips what
    was passed on."""

    def ends(event: Event) -> bool:
        if event.get("type") not in TURN_END_EVENTS:
            return False
        ended: object = event.get("payload", {}).get("turn_id", turn_id)
        return ended == turn_id

    return Follow(
        request, after=0, ends_with=ends, resume_on_close=False,
        max_reconnects=max_reconnects, reconnect_delay=reconnect_delay,
    )  # fmt: skip
