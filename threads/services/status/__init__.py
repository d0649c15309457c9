"""The one door for status changes of threads and turns.

Every change of ``Thread.status`` or ``Turn.status`` happens in this package and writes the row
and its event in one transaction: ``thread.status`` once per change of the thread's status,
``queue.changed`` for every change to the queue of turns, ``turn.started`` and the turn's
end (``turn.completed``, ``turn.failed``, ``turn.cancelled``). The statements the engine runs
on every turn are literal SQL, one per change, with the transition rules in their ``WHERE``
and ``CASE`` clauses; :data:`THREAD_TRANSITIONS` and :data:`TURN_TRANSITIONS` state the same
rules as tables (a test drives every statement from every status and checks the table).

Statuses are the vocabulary of :class:`threads.models.RunStatus`. A thread's stored status is
``queued`` while turns wait, ``running``/``retrying`` while one runs, and otherwise its
``rest_status``: how its last turn ended (``completed``, ``waiting_input``, ``failed``,
``cancelled``, ``blocked``).

Modules: ``rules`` (the transition tables, the status sets, :func:`turn_json` and the
``thread.status`` event), ``queueing`` (entering and leaving the queue), ``running`` (taking,
retrying, pausing for a person and resuming) and ``ending`` (ending turns, letting a thread
rest); this module re-exports their public names.
"""

from threads.services.status.ending import thread_rest, turn_fail_crashed, turn_finish
from threads.services.status.queueing import (
    thread_settle,
    turn_enqueue,
    turn_promote,
    turns_cancel_waiting,
)
from threads.services.status.rules import (
    NOT_STORED,
    THREAD_TRANSITIONS,
    TURN_TRANSITIONS,
    turn_json,
)
from threads.services.status.running import (
    turn_inputs_take,
    turn_pause,
    turn_release,
    turn_resume,
    turn_retrying,
)

__all__ = [
    "NOT_STORED",
    "THREAD_TRANSITIONS",
    "TURN_TRANSITIONS",
    "thread_rest",
    "thread_settle",
    "turn_enqueue",
    "turn_fail_crashed",
    "turn_finish",
    "turn_inputs_take",
    "turn_json",
    "turn_pause",
    "turn_promote",
    "turn_release",
    "turn_resume",
    "turn_retrying",
    "turns_cancel_waiting",
]
