"""The status vocabulary of turns and of the thread read model, and its sets."""

from __future__ import annotations

from django.db import models


class RunStatus(models.TextChoices):
    """The status vocabulary of turns and of the thread read model (agent-runtime-events,
    "Completion and failure semantics"). docs/engine.md says when each is produced and which
    the platform never produces, and why."""

    ACCEPTED = "accepted"  # never stored: a turn is queued in the transaction accepting it
    QUEUED = "queued"  # waiting behind another turn, or parked by a stop
    PREPARING = "preparing"  # never stored: context is assembled inside ``running``
    RUNNING = "running"  # a flow is executing the turn
    STREAMING = "streaming"  # read model only: a model answer is being streamed
    RETRYING = "retrying"  # a model call is being retried or a fallback is active
    WAITING_INPUT = "waiting_input"  # the human side is next, or a tool asked for input
    WAITING_PERMISSION = "waiting_permission"  # a tool call waits for approval
    # A turn paused until a budget or quota has room; in the read model also: work waits and
    # no worker takes it.
    WAITING_RESOURCE = "waiting_resource"
    BLOCKED = "blocked"  # a credential (a model's API key) is missing
    LOST = "lost"  # read model only: running, but no worker holds the thread
    TIMED_OUT = "timed_out"  # a person's decision was not made in time
    COMPLETED = "completed"  # the work ended as its agent defines success
    FAILED = "failed"  # the work cannot continue without a new request
    CANCELLED = "cancelled"  # a stop, cancel, interrupt, rollback or terminate ended it
    STALE = "stale"  # read model only: the lock store is unreachable, liveness unknown


# A turn in one of these is over; nothing more will be written for it.
TURN_TERMINAL = frozenset(
    {
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.TIMED_OUT,
        RunStatus.BLOCKED,
    }
)
# A turn in one of these is being run by a flow.
TURN_ACTIVE = frozenset({RunStatus.RUNNING, RunStatus.RETRYING})
# A turn in one of these rests on a person's decision (an action) or waits for a budget or
# quota to have room (``waiting_resource``); no flow runs it.
TURN_PAUSED = frozenset(
    {RunStatus.WAITING_PERMISSION, RunStatus.WAITING_INPUT, RunStatus.WAITING_RESOURCE}
)
# What a thread rests in when no turn runs or waits.
THREAD_REST = frozenset(
    {
        RunStatus.COMPLETED,
        RunStatus.WAITING_INPUT,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.BLOCKED,
        RunStatus.TIMED_OUT,
    }
)
