"""Submitting turns: the durable queue of a thread's turns is its inbox.

A turn enters in the same transaction as its cause and ``drive_thread`` is enqueued on
commit, so nothing is lost between the two (ARCHITECTURE §5). The lock holder runs waiting
turns one at a time in queue order (FIFO; a promoted or interrupting turn goes first); an
input a running turn queues for itself (``state.queue_message``) joins that turn and is
drained before its next step (runtime §9). ``multitask_strategy`` says what a new turn does
to the active one: ``enqueue`` (wait behind it), ``reject`` (409), ``interrupt`` (cancel it,
keep what it wrote), ``rollback`` (cancel it, delete what it wrote) or ``join`` (become an
input of the running turn, drained before its next model call, runtime §2 and §9; with no
turn running, wait like ``enqueue``). ``join`` is what ``POST .../messages`` and
``state.queue_message`` at rest do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction

from common.errors import Conflict, LimitExceeded, NotFound, ValidationFailed
from common.ids import new_id
from threads.events import Outbox
from threads.models import TURN_ACTIVE, RunStatus, Thread, Turn, TurnKind, TurnSource, TurnStrategy
from threads.services.fence import ThreadTerminated, fence_check
from threads.services.lock import control_send
from threads.services.messages import check_content, check_metadata
from threads.services.status import turn_enqueue
from threads.services.wakeups import wake_on_commit

QUEUEABLE_ROLES = ("user", "assistant", "system")
MAX_TOOL_ARGS_BYTES = 256 * 1024
MAX_USER_CHARS = 200  # Turn.user


class ThreadBusy(Conflict):
    """``multitask_strategy=reject`` and a turn is active or waiting."""

    code = "thread_busy"


def terminated_error() -> ThreadTerminated:
    return ThreadTerminated("the thread is terminated; it accepts no new work")


def _busy_turn(thread: Thread, paused_turn_id: Any) -> Turn | None:
    """The turn a new one would wait behind: the active one, else the paused one (resting
    on a person's decision, or answered and about to resume), else the first waiting."""
    rows = Turn.objects.filter(thread_id=thread.pk, host__isnull=True)
    active = rows.filter(status__in=TURN_ACTIVE).first()
    if active is None and paused_turn_id is not None:
        active = rows.filter(pk=paused_turn_id).first()
    return active or rows.filter(status=RunStatus.QUEUED).order_by("position").first()


def turn_submit(
    *,
    thread: Thread,
    kind: str,
    payload: Mapping[str, Any],
    source: str,
    strategy: str = TurnStrategy.ENQUEUE,
    metadata: Mapping[str, Any] | None = None,
    clear_stop: bool = False,
    host: Turn | None = None,
    outbox: Outbox | None = None,
    wake: bool = True,
    user: str | None = None,
) -> Turn:
    """Submit a turn (submit_turn): it waits in the thread's queue and the thread is woken
    after commit. Joins the caller's transaction. ``user`` is the end user the turn is for
    (usage and budgets count it); None or empty: the thread's ``user_id``.

    ``strategy`` (see the module docstring): ``reject`` raises ThreadBusy (409) naming the
    turn it would wait behind; ``interrupt`` and ``rollback`` ask the active turn to end
    ``cancelled`` and put this one first. ``clear_stop`` (a new user message) lifts a user
    stop. ``host``: the running turn this input joins (``state.queue_message`` during its
    flow). ``wake`` False: the caller drives the thread itself (a blocking subagent call;
    the sweeper wakes it if the caller dies first). Raises ThreadTerminated (409) on a
    terminated thread, NotFound when it is gone.
    """
    if strategy not in TurnStrategy.values:
        raise ValidationFailed(
            f"multitask_strategy must be one of {', '.join(TurnStrategy.values)}",
            field="multitask_strategy",
        )
    if user is not None and (not isinstance(user, str) or len(user) > MAX_USER_CHARS):
        raise ValidationFailed(
            f"user must be a string of at most {MAX_USER_CHARS} characters", field="user"
        )
    turn = Turn(
        tenant_id=thread.tenant_id, thread=thread, kind=kind, source=source, strategy=strategy,
        payload=dict(payload), metadata=check_metadata(metadata or {}), host=host,
        user=user or thread.user_id,
    )  # fmt: skip
    with transaction.atomic():
        active: Turn | None = None
        joined = strategy == TurnStrategy.JOIN and host is None and _join(thread, turn)
        if strategy not in (TurnStrategy.ENQUEUE, TurnStrategy.JOIN) and host is None:
            locked = fence_check(thread=thread, fence=None)
            if locked.terminated_at is not None:
                raise terminated_error()
            busy = _busy_turn(thread, locked.paused_turn_id)
            if strategy == TurnStrategy.REJECT and busy is not None:
                raise ThreadBusy(
                    f"turn {busy.pk} is {busy.status} on this thread; multitask_strategy "
                    "reject refuses another until it ends",
                    field="multitask_strategy",
                )
            started = busy is not None and (
                busy.status in TURN_ACTIVE or busy.pk == locked.paused_turn_id
            )
            active = busy if started else None
        front = strategy in (TurnStrategy.INTERRUPT, TurnStrategy.ROLLBACK)
        if not turn_enqueue(turn=turn, thread=thread, clear_stop=clear_stop, front=front,
                            outbox=outbox):  # fmt: skip
            if Thread.objects.filter(pk=thread.pk).exists():
                raise terminated_error()
            raise NotFound("the thread no longer exists")
        if active is not None:
            turn_cancel_request(thread=thread, turn=active, mode=strategy)
        if joined:
            _ring_on_commit(thread)
        elif host is None and wake:
            wake_on_commit(thread)
    return turn


def _join(thread: Thread, turn: Turn) -> bool:
    """Make ``turn`` an input of the thread's running turn, if one runs; True when it did.
    The thread row is locked first (only when the thread shows running: a resting thread
    costs nothing), so the running turn cannot end between this read and the insert: its
    end takes that row too, and then finds the joined input left over and runs it as a turn
    of its own (never dropped)."""
    if thread.status not in (RunStatus.RUNNING, RunStatus.RETRYING):
        return False
    fence_check(thread=thread, fence=None)
    running = (
        Turn.objects.filter(thread_id=thread.pk, host__isnull=True, status__in=TURN_ACTIVE)
        .only("id")
        .first()
    )
    if running is None:
        return False
    turn.host = running
    return True


def _ring_on_commit(thread: Thread) -> None:
    """Tell the running flow (through its lock holder's control list) that an input joined
    its turn, after commit; it drains it before its next model call."""
    tenant_id, thread_id = thread.tenant_id, thread.pk
    transaction.on_commit(
        lambda: control_send(tenant_id=tenant_id, thread_id=thread_id, signal="inputs"),
        robust=True,
    )


def turn_cancel_request(*, thread: Thread, turn: Turn, mode: str) -> None:
    """Ask the flow running ``turn`` to end it ``cancelled`` (``mode``: cancel, interrupt or
    rollback): the request is stored on the turn (a worker that takes the thread over finds
    it) and the lock holder is signalled after commit."""
    Turn.objects.filter(pk=turn.pk).update(cancel_requested=mode)
    turn.cancel_requested = mode
    tenant_id, thread_id = thread.tenant_id, thread.pk
    transaction.on_commit(
        lambda: control_send(tenant_id=tenant_id, thread_id=thread_id, signal="cancel"),
        robust=True,
    )


def message_queue(
    *,
    thread: Thread,
    role: str,
    content: str | None,
    attachments: Sequence[Mapping[str, Any]] = (),
    silent: bool = False,
    metadata: Mapping[str, Any] | None = None,
    source: str = TurnSource.MESSAGE,
    strategy: str = TurnStrategy.ENQUEUE,
    turn_metadata: Mapping[str, Any] | None = None,
    host: Turn | None = None,
    outbox: Outbox | None = None,
    wake: bool = True,
    user: str | None = None,
    client_tools: Sequence[Mapping[str, Any]] = (),
) -> Turn:
    """Submit a message as a turn (POST .../messages, POST .../turns, ``state.queue_message``);
    the message is persisted when its turn runs, before its next model call. A ``user``
    message lifts a user stop.

    ``attachments`` are AttachmentRefs already stored in the thread. The message id is fixed
    now (``payload.message_id``) so the caller can follow it. ``metadata`` is the message's,
    ``turn_metadata`` the turn's. ``client_tools`` (checked by the caller) are tools the
    submitter's client runs, offered to the turn's model steps (threads.runtime.client_tools).
    """
    if role not in QUEUEABLE_ROLES:
        raise ValidationFailed(f"role must be one of {', '.join(QUEUEABLE_ROLES)}", field="role")
    if content is not None and not isinstance(content, str):
        raise ValidationFailed("content must be a string", field="content")
    if not content and not attachments:
        raise ValidationFailed("content or attachments is required", field="content")
    check_content(content)
    payload = {
        "message_id": str(new_id()),
        "role": role,
        "content": content,
        "silent": bool(silent),
        "metadata": check_metadata(metadata or {}),
        "attachments": [dict(ref) for ref in attachments],
    }
    if client_tools:
        payload["client_tools"] = [dict(tool) for tool in client_tools]
    return turn_submit(
        thread=thread, kind=TurnKind.MESSAGE, payload=payload, source=source, strategy=strategy,
        metadata=turn_metadata, clear_stop=role == "user", host=host, outbox=outbox, wake=wake,
        user=user,
    )  # fmt: skip


def tool_queue(*, thread: Thread, name: str, args: Mapping[str, Any] | None) -> Turn:
    """Queue a tool call at rest (``state.queue_tool``); its turn runs it, then side A acts."""
    if not isinstance(name, str) or not name:
        raise ValidationFailed("name must be a tool name", field="name")
    arguments = dict(args or {})
    size = len(json.dumps(arguments, default=str))
    if size > MAX_TOOL_ARGS_BYTES:
        raise LimitExceeded(
            f"tool arguments are {size} bytes; the limit is {MAX_TOOL_ARGS_BYTES}", field="args"
        )
    return turn_submit(
        thread=thread, kind=TurnKind.TOOL, payload={"name": name, "args": arguments},
        source=TurnSource.QUEUE_TOOL,
    )  # fmt: skip


def continue_queue(*, thread: Thread, side: str = "a") -> Turn:
    """Queue a ``continue`` (POST .../continue): the given side takes a turn without a message."""
    if side not in ("a", "b"):
        raise ValidationFailed("side must be a or b", field="side")
    return turn_submit(
        thread=thread, kind=TurnKind.CONTINUE, payload={"side": side},
        source=TurnSource.CONTINUE,
    )  # fmt: skip


def queued_message_fields(turn: Turn) -> dict[str, Any]:
    """For a message turn, ``message_id`` and ``message``: the message it will store, as it
    will look (``status: queued``); nothing for other turns."""
    payload = turn.payload
    if "message_id" not in payload:
        return {}
    message = {
        "id": payload["message_id"], "role": payload["role"], "content": payload["content"],
        "attachments": payload["attachments"], "silent": payload["silent"],
        "metadata": payload["metadata"], "status": "queued", "created_at": turn.created_at,
    }  # fmt: skip
    return {"message_id": message["id"], "message": message}
