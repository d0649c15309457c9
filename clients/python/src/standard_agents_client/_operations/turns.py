"""Turns (submitted, waited for, streamed, moved in the queue), a thread's event log and
its call records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from standard_agents_client._call import (
    EVENT_STREAM,
    Call,
    body,
    idempotency,
    query,
    read_json,
    read_nothing,
    read_page,
    segment,
)
from standard_agents_client._operations.threads import WAIT_MARGIN_S, message_input
from standard_agents_client._streams import (
    STREAM_READ_TIMEOUT_S,
    Follow,
    thread_follow,
    turn_follow,
)
from standard_agents_client.pagination import Page
from standard_agents_client.types import (
    Event,
    Log,
    MessageRole,
    Strategy,
    SubmittedTurn,
    Turn,
    TurnWait,
)

# Turns ----------------------------------------------------------------------------------------


def _turn_body(
    content: str | None,
    role: MessageRole | None,
    attachments: Sequence[Mapping[str, Any]] | None,
    silent: bool | None,
    metadata: Mapping[str, Any] | None,
    strategy: Strategy | None,
    turn_metadata: Mapping[str, Any] | None,
) -> dict[str, Any]:
    return {
        "input": message_input(content, role, attachments, silent, metadata),
        **body(multitask_strategy=strategy, metadata=turn_metadata),
    }


def turn_submit(
    thread_id: str,
    content: str | None,
    *,
    role: MessageRole | None = None,
    attachments: Sequence[Mapping[str, Any]] | None = None,
    silent: bool | None = None,
    metadata: Mapping[str, Any] | None = None,
    strategy: Strategy | None = None,
    turn_metadata: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> Call[SubmittedTurn]:
    """Submit a message as a turn; answered at once with the queued turn (a worker runs
    it). ``strategy`` says what happens to a turn already running: ``enqueue`` (the
    default: wait behind it), ``reject`` (``Conflict``, code ``thread_busy``),
    ``interrupt`` or ``rollback``. ``metadata`` is the message's, ``turn_metadata`` the
    turn's."""
    payload = _turn_body(content, role, attachments, silent, metadata, strategy, turn_metadata)
    return Call(
        "POST", f"/threads/{segment(thread_id)}/turns", read_json, json=payload,
        headers=idempotency(idempotency_key),
    )  # fmt: skip


def turn_submit_and_wait(
    thread_id: str,
    content: str | None,
    *,
    timeout: float = 30.0,
    role: MessageRole | None = None,
    attachments: Sequence[Mapping[str, Any]] | None = None,
    silent: bool | None = None,
    metadata: Mapping[str, Any] | None = None,
    strategy: Strategy | None = None,
    turn_metadata: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> Call[TurnWait]:
    """Submit a turn and wait for it in one request, up to ``timeout`` seconds (at most
    600): the turn, the messages it wrote and ``done`` (false when the timeout passed
    first, or when the turn waits on a person: ``actions`` says what they are asked). A
    repeat with the same ``idempotency_key`` queues nothing and waits for the first
    request's turn."""
    payload = _turn_body(content, role, attachments, silent, metadata, strategy, turn_metadata)
    return Call(
        "POST", f"/threads/{segment(thread_id)}/turns/wait", read_json,
        params=query(timeout=timeout), json=payload, headers=idempotency(idempotency_key),
        timeout=timeout + WAIT_MARGIN_S,
    )  # fmt: skip


def turn_list(
    thread_id: str,
    *,
    status: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[Turn]]:
    """The thread's turns, newest first; ``status`` filters."""
    params = query(status=status, limit=limit, cursor=cursor)
    return Call("GET", f"/threads/{segment(thread_id)}/turns", read_page, params)


def turn_get(turn_id: str) -> Call[Turn]:
    """The turn: status, outcome, error, usage and the ids of the messages it wrote."""
    return Call("GET", f"/turns/{segment(turn_id)}", read_json)


def turn_wait(turn_id: str, *, timeout: float = 30.0) -> Call[TurnWait]:
    """Wait until the turn is terminal, rests on a person's decision, or ``timeout``
    seconds (at most 600) pass: the turn, the messages it wrote and ``done``."""
    return Call(
        "GET", f"/turns/{segment(turn_id)}/wait", read_json, query(timeout=timeout),
        timeout=timeout + WAIT_MARGIN_S,
    )  # fmt: skip


def turn_cancel(turn_id: str) -> Call[Turn]:
    """Cancel a turn: a queued one ends cancelled at once, a running one is aborted (what
    it wrote stays). Idempotent; a finished turn is left as it is."""
    return Call("POST", f"/turns/{segment(turn_id)}/cancel", read_json)


def turn_remove(turn_id: str) -> Call[Turn]:
    """Remove a queued turn (it ends cancelled, outcome ``removed``); ``Conflict`` for a
    turn that is not queued."""
    return Call("DELETE", f"/turns/{segment(turn_id)}", read_json)


def turn_promote(turn_id: str) -> Call[Turn]:
    """Move a queued turn to the front of its thread's queue; ``Conflict`` for a turn that
    is not queued."""
    return Call("POST", f"/turns/{segment(turn_id)}/promote", read_json)


def turn_stream(
    turn_id: str,
    *,
    reasoning: bool = False,
    max_reconnects: int | None = 5,
    reconnect_delay: float | None = None,
) -> Follow:
    """The turn's events as they happen, from its first (``queue.changed`` added) to the
    one that ends it (``turn.completed``, ``turn.failed``, ``turn.cancelled``, or its
    removal from the queue), then the iteration ends; ``reasoning`` adds
    ``reasoning.delta``. A dropped connection is opened again (at most ``max_reconnects``
    times in a row) and what was passed on already is skipped."""
    request = Call(
        "GET", f"/turns/{segment(turn_id)}/stream", read_nothing,
        query(reasoning=True if reasoning else None), headers={"Accept": EVENT_STREAM},
        timeout=STREAM_READ_TIMEOUT_S,
    )  # fmt: skip
    return turn_follow(
        lambda _after: request, turn_id=turn_id, max_reconnects=max_reconnects,
        reconnect_delay=reconnect_delay,
    )  # fmt: skip


# Events ---------------------------------------------------------------------------------------


def event_list(
    thread_id: str, *, after: int | None = None, limit: int | None = None
) -> Call[Page[Event]]:
    """A page of the thread's event log: the events with a ``sequence`` after ``after``
    (default 0: from the first), oldest first."""
    params = query(after=after, limit=limit)
    return Call("GET", f"/threads/{segment(thread_id)}/events", read_page, params)


def event_follow(
    thread_id: str,
    *,
    after: int = 0,
    reasoning: bool = False,
    max_reconnects: int | None = None,
    reconnect_delay: float | None = None,
) -> Follow:
    """The thread's events with a sequence after ``after`` (0: the whole log), then live
    ones as they happen, each once and in order, until ``thread.terminated``; stop by
    breaking out of the loop.

    When the connection drops, or the server closes the stream, the follower connects
    again from the last sequence it passed on (``?after=`` and ``Last-Event-ID``) after the
    delay the server asks for (``reconnect_delay`` overrides it), so nothing is missed or
    repeated; after ``max_reconnects`` failed connections in a row (None: no limit) it
    raises ``ApiConnectionError``. Live-only events (``model.delta``, and
    ``reasoning.delta`` with ``reasoning``) have no sequence and are not replayed."""

    def request(last: int) -> Call[None]:
        headers = {"Accept": EVENT_STREAM}
        if last:
            headers["Last-Event-ID"] = str(last)
        params = query(after=last, reasoning=True if reasoning else None)
        path = f"/threads/{segment(thread_id)}/events"
        return Call(
            "GET", path, read_nothing, params, headers=headers, timeout=STREAM_READ_TIMEOUT_S
        )

    return thread_follow(
        request, after=after, max_reconnects=max_reconnects, reconnect_delay=reconnect_delay
    )


# Logs -----------------------------------------------------------------------------------------


def log_list(
    thread_id: str,
    *,
    kind: str | None = None,
    order: Literal["asc", "desc"] | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[Log]]:
    """The thread's model and tool call records; ``kind`` filters (``llm``, ``tool``,
    ``code``, ...)."""
    params = query(kind=kind, order=order, limit=limit, cursor=cursor)
    return Call("GET", f"/threads/{segment(thread_id)}/logs", read_page, params)


def log_get(thread_id: str, log_id: str) -> Call[Log]:
    """One log record of the thread."""
    return Call("GET", f"/threads/{segment(thread_id)}/logs/{segment(log_id)}", read_json)
