"""The status machine (threads.services.status): every statement that changes a thread's or a
turn's status, run from every stored status, lands on a transition its table allows and
writes exactly one ``thread.status`` event when the thread's status changed (none when it
did not)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from django.db import transaction

from common.errors import DomainError
from threads.models import THREAD_REST, TURN_PAUSED, TURN_TERMINAL, Event, RunStatus, Thread, Turn
from threads.services.control import thread_terminate
from threads.services.fence import StaleFence
from threads.services.inbox import message_queue
from threads.services.status import (
    NOT_STORED,
    THREAD_TRANSITIONS,
    TURN_TRANSITIONS,
    thread_rest,
    thread_settle,
    turn_finish,
    turn_inputs_take,
    turn_pause,
    turn_release,
    turn_resume,
    turn_retrying,
    turns_cancel_waiting,
)

pytestmark = pytest.mark.django_db

S = RunStatus
FENCE = 7
STORED_THREAD = sorted(THREAD_TRANSITIONS)
STORED_TURN = sorted(TURN_TRANSITIONS)


def _turn(thread: Thread, status: str) -> Turn:
    """A turn of ``thread`` in ``status`` (taken under FENCE when it is past the queue)."""
    turn = message_queue(thread=thread, role="user", content="hi")
    Turn.objects.filter(pk=turn.pk).update(status=status, fence=FENCE)
    if status in TURN_PAUSED:  # a paused turn holds its thread's queue
        Thread.objects.filter(pk=thread.pk).update(paused_turn=turn)
    turn.refresh_from_db()
    return turn


def _submit(thread: Thread, turn: Turn) -> None:
    message_queue(thread=thread, role="user", content="another")


def _take(thread: Thread, turn: Turn) -> None:
    turn_inputs_take(thread=thread, fence=FENCE, turn=turn)


def _finish(status: str, rest: str) -> Callable[[Thread, Turn], None]:
    def finish(thread: Thread, turn: Turn) -> None:
        turn_finish(thread=thread, fence=FENCE, turn=turn, status=status, rest=rest, outcome="test")

    return finish


def _retry(retrying: bool) -> Callable[[Thread, Turn], None]:
    def retry(thread: Thread, turn: Turn) -> None:
        turn_retrying(thread=thread, fence=FENCE, turn=turn, retrying=retrying)

    return retry


def _pause(status: str) -> Callable[[Thread, Turn], None]:
    def pause(thread: Thread, turn: Turn) -> None:
        turn_pause(thread=thread, fence=FENCE, turn=turn, status=status)

    return pause


def _release(thread: Thread, turn: Turn) -> None:
    with transaction.atomic():
        Thread.objects.select_for_update().get(pk=thread.pk)
        turn_release(thread=thread, turn=turn)


def _resume(thread: Thread, turn: Turn) -> None:
    turn_resume(thread=thread, fence=FENCE, turn=turn)


def _rest(thread: Thread, turn: Turn) -> None:
    thread_rest(thread=thread, fence=FENCE, rest=S.FAILED)


def _settle(thread: Thread, turn: Turn) -> None:
    turns_cancel_waiting(thread=thread)
    thread_settle(thread=thread)


def _terminate(thread: Thread, turn: Turn) -> None:
    thread_terminate(thread=thread)


OPERATIONS: dict[str, Callable[[Thread, Turn], None]] = {
    "submit": _submit,
    "take": _take,
    "retry": _retry(True),
    "answer after a retry": _retry(False),
    **{
        f"finish {status}/{rest}": _finish(status, rest)
        for status in sorted(TURN_TERMINAL)
        for rest in sorted(THREAD_REST)
    },
    **{f"pause {status}": _pause(status) for status in sorted(TURN_PAUSED)},
    "release": _release,
    "resume": _resume,
    "rest": _rest,
    "settle": _settle,
    "terminate": _terminate,
}


def _status_events(thread: Thread) -> list[str]:
    rows = Event.objects.filter(thread=thread, type="thread.status").order_by("sequence")
    return [row.payload["status"] for row in rows]


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize("start", STORED_THREAD)
@pytest.mark.parametrize("turn_status", [S.QUEUED, S.RUNNING, S.RETRYING])
def test_every_thread_status_change_is_allowed_and_announced_once(
    thread: Thread, start: str, operation: str, turn_status: str
) -> None:
    turn = _turn(thread, turn_status)
    Thread.objects.filter(pk=thread.pk).update(status=start, fence=FENCE)
    if start in TURN_PAUSED:  # as a pause leaves it
        Thread.objects.filter(pk=thread.pk).update(paused_turn=turn)
    thread.refresh_from_db()
    announced = _status_events(thread)

    # Refused (a stale fence, a terminated thread): then nothing may have changed.
    with contextlib.suppress(DomainError):
        OPERATIONS[operation](thread, turn)

    thread.refresh_from_db()
    new_events = _status_events(thread)[len(announced) :]
    if thread.status == start:
        assert new_events == []
    else:
        assert thread.status in THREAD_TRANSITIONS[start], (start, thread.status)
        assert new_events == [thread.status]


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize("start", STORED_TURN)
def test_every_turn_status_change_is_allowed(thread: Thread, start: str, operation: str) -> None:
    turn = _turn(thread, start)
    Thread.objects.filter(pk=thread.pk).update(status=S.RUNNING, fence=FENCE)
    thread.refresh_from_db()

    with contextlib.suppress(DomainError):
        OPERATIONS[operation](thread, turn)

    turn.refresh_from_db()
    if turn.status != start:
        assert turn.status in TURN_TRANSITIONS[start], (start, turn.status)


def test_ending_a_turn_with_a_stale_fence_is_refused_and_changes_nothing(thread: Thread) -> None:
    turn = _turn(thread, S.RUNNING)
    Thread.objects.filter(pk=thread.pk).update(status=S.RUNNING, fence=FENCE + 1)
    thread.refresh_from_db()

    with pytest.raises(StaleFence):
        _finish(S.COMPLETED, S.COMPLETED)(thread, turn)

    thread.refresh_from_db()
    turn.refresh_from_db()
    assert (thread.status, turn.status) == (S.RUNNING, S.RUNNING)
    assert not Event.objects.filter(thread=thread, type="turn.completed").exists()


def test_the_tables_and_the_never_stored_list_cover_the_whole_vocabulary() -> None:
    stored = set(THREAD_TRANSITIONS) | set(TURN_TRANSITIONS)
    for targets in [*THREAD_TRANSITIONS.values(), *TURN_TRANSITIONS.values()]:
        stored |= set(targets)
    assert stored | set(NOT_STORED) == set(RunStatus.values)
    assert not stored & (set(NOT_STORED) - {S.TIMED_OUT})
