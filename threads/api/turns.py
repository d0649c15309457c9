"""Turns: ``POST/GET /api/v1/threads/{id}/turns`` (submit_turn, list) and
``/api/v1/turns/{turn_id}`` (get, remove, cancel, promote). Waiting for a turn is in
:mod:`threads.api.turn_wait`, streaming its events in :mod:`threads.api.turn_stream`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction
from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import DomainError
from common.inputs import StrictInput
from common.pagination import PAGE_PARAMETERS, paginate_page
from common.schema import error_response, page_of
from tenancy.principals import Principal
from threads.api.base import (
    IDEMPOTENCY_KEY,
    WORK_REFUSED,
    ThreadScopedView,
    TurnScopedView,
    idempotent,
    turn_submitted_audit,
)
from threads.api.messages import EndUserField, MessageInput
from threads.api.run_outputs import QueuedMessageSerializer, TurnSerializer
from threads.models import RunStatus, Thread, Turn, TurnSource, TurnStrategy
from threads.services.attachments import attachments_store
from threads.services.control import turn_cancel
from threads.services.inbox import message_queue, queued_message_fields
from threads.services.spending import routing_limit_summary, work_admit
from threads.services.status import turn_json
from threads.services.turns import turn_list, turn_message_ids, turn_promote_queued, turn_remove

SUBMIT_DESCRIPTION = (
    "Queues a message as a turn and answers 202 with it at once. `multitask_strategy` says "
    "what happens to a turn already running: `enqueue` (wait behind it, in submission order), "
    "`reject` (409 `thread_busy` naming it), `interrupt` (it ends cancelled, what it wrote "
    "stays), `rollback` (it ends cancelled and what it wrote is deleted) or `join` (the "
    "message joins the running turn, stored before its next model call; with none running, "
    "as `enqueue`). A repeat with the "
    "same `Idempotency-Key` answers the first answer and queues nothing."
)
REMOVE_DESCRIPTION = "The queued turn ends `cancelled` (outcome `removed`); 409 for any other."
CANCEL_DESCRIPTION = (
    "A queued turn ends `cancelled` at once; a running one is aborted (what it wrote stays, "
    "its open calls are closed) and may still show `running` for a moment: wait for it. A "
    "finished turn is left as it is."
)


# The fields of a message input that message_queue's errors may name.
MESSAGE_FIELDS = frozenset({"content", "role", "attachments", "silent", "metadata"})


class TurnSubmitInput(StrictInput):
    input = MessageInput(help_text="the message: content, role, attachments, silent, metadata")
    user = EndUserField()
    multitask_strategy = serializers.ChoiceField(
        choices=TurnStrategy.choices, default=TurnStrategy.ENQUEUE
    )
    metadata = serializers.DictField(required=False, help_text="the turn's metadata")


class TurnListQuery(serializers.Serializer[Any]):
    status = serializers.ChoiceField(
        choices=RunStatus.choices, required=False, help_text="only the turns in this status"
    )


class SubmittedTurnSerializer(TurnSerializer):
    """A submitted turn, queued; for a message, the message as it will be stored."""

    message_id = serializers.UUIDField(
        required=False, help_text="for a message: the id it will have"
    )
    message = QueuedMessageSerializer(
        required=False, help_text="for a message: the message as it will be stored"
    )


def submitted_json(turn: Turn) -> dict[str, Any]:
    """A 202 answer: the turn, and for a message turn the message as it will be stored."""
    return {**turn_json(turn), **queued_message_fields(turn)}


def _detail(turn: Turn) -> dict[str, Any]:
    return turn_json(turn, message_ids=turn_message_ids(turns=[turn])[turn.pk])


def _listed(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    written = turn_message_ids(turns=turns)
    return [turn_json(turn, message_ids=written[turn.pk]) for turn in turns]


def message_submit(
    principal: Principal,
    thread: Thread,
    given: Mapping[str, Any],
    *,
    strategy: str = TurnStrategy.ENQUEUE,
    turn_metadata: Mapping[str, Any] | None = None,
    user: str | None = None,
    prefix: str = "",
) -> Turn:
    """Queue ``given`` (a MessageInput's data) as a turn of ``thread``: the work admitted,
    its attachments stored, the turn queued and audited. Shared by every route that submits
    a message turn so each applies the same admission. ``prefix`` is where the input sits in
    the request's body (``"input."``), for the field an error names."""
    work_admit(thread=thread, user=user)
    refs = attachments_store(
        thread=thread, items=given.get("attachments", []), field=f"{prefix}attachments"
    )
    with transaction.atomic():
        try:
            turn = message_queue(
                thread=thread, role=given["role"], content=given.get("content"),
                attachments=refs, silent=given["silent"], metadata=given.get("metadata"),
                source=TurnSource.SUBMIT, strategy=strategy, turn_metadata=turn_metadata,
                user=user,
            )  # fmt: skip
        except DomainError as error:
            if prefix and error.field in MESSAGE_FIELDS:
                error.field = f"{prefix}{error.field}"
            raise
        turn_submitted_audit(principal, turn, user)
    return turn


def submit_turn(view: ThreadScopedView, request: Request) -> tuple[Response, Turn]:
    """submit_turn from the request's body: the answer (202, or the first answer given for
    a repeated ``Idempotency-Key``) and the turn it names."""
    payload = TurnSubmitInput(data=request.data)
    payload.is_valid(raise_exception=True)
    data = payload.validated_data
    thread = view.thread()
    given = data["input"]
    created: list[Turn] = []

    def submit() -> tuple[int, dict[str, Any]]:
        turn = message_submit(
            view.principal, thread, given, strategy=data["multitask_strategy"],
            turn_metadata=data.get("metadata"), user=data.get("user"),
        )  # fmt: skip
        created.append(turn)
        return status.HTTP_202_ACCEPTED, submitted_json(turn)

    answer = idempotent(request, view.principal, submit)
    turn = created[0] if created else Turn.objects.get(pk=answer.data["id"], thread=thread)
    return answer, turn


class ThreadTurnsView(ThreadScopedView):
    @extend_schema(
        summary="Submit a turn to a thread", description=SUBMIT_DESCRIPTION,
        request=TurnSubmitInput, parameters=[IDEMPOTENCY_KEY],
        responses={202: SubmittedTurnSerializer, 409: WORK_REFUSED},
        operation_id="thread_turns_submit",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str) -> Response:
        """submit_turn: queue a message as a turn and answer 202 with it at once.
        ``multitask_strategy`` says what happens to a turn already running: ``enqueue``
        (wait behind it, FIFO), ``reject`` (409 naming it), ``interrupt`` (it ends
        cancelled, what it wrote stays) or ``rollback`` (it ends cancelled and what it wrote
        is deleted). ``Idempotency-Key`` makes a retry return the first answer."""
        return submit_turn(self, request)[0]

    @extend_schema(
        summary="List a thread's turns", description="Newest first.",
        parameters=[TurnListQuery, *PAGE_PARAMETERS], responses=page_of(TurnSerializer),
        operation_id="thread_turns_list",
    )  # fmt: skip
    def get(self, request: Request, thread_id: str) -> Response:
        """The thread's turns, newest first; ``?status=`` filters by status."""
        query = TurnListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = turn_list(thread=self.thread(), status=query.validated_data.get("status"))
        return paginate_page(request, rows, _listed, view=self)


NOT_QUEUED = error_response(409, "The turn is not queued")


class TurnDetailView(TurnScopedView):
    @extend_schema(summary="Get a turn", responses=TurnSerializer, operation_id="turns_retrieve")
    def get(self, request: Request, turn_id: str) -> Response:
        """The turn: status, outcome, error, usage, the ids of the messages it wrote, and
        where the budgets it spends against stand (``routing_limit_summary``)."""
        turn = self.turn()
        summary = routing_limit_summary(thread=turn.thread, turn=turn)
        return Response({**_detail(turn), "routing_limit_summary": summary})

    @extend_schema(
        summary="Remove a queued turn", description=REMOVE_DESCRIPTION,
        responses={200: TurnSerializer, 409: NOT_QUEUED}, operation_id="turns_remove",
    )  # fmt: skip
    def delete(self, request: Request, turn_id: str) -> Response:
        """remove_queued_turn: a queued turn ends cancelled (outcome ``removed``); 409 for a
        turn that is not queued."""
        turn = self.turn()
        return Response(_detail(turn_remove(thread=turn.thread, turn=turn)))


class TurnCancelView(TurnScopedView):
    @extend_schema(
        summary="Cancel a turn", description=CANCEL_DESCRIPTION, request=None,
        responses=TurnSerializer, operation_id="turns_cancel",
    )  # fmt: skip
    def post(self, request: Request, turn_id: str) -> Response:
        """interrupt_turn: a queued turn ends cancelled at once; a running one is aborted
        (what it wrote stays, its open calls are closed). Idempotent; a finished turn is
        left as it is. Answers the turn as it stands (a running one may still be
        ``running`` for a moment: wait for it)."""
        turn = self.turn()
        return Response(_detail(turn_cancel(thread=turn.thread, turn=turn)))


class TurnPromoteView(TurnScopedView):
    @extend_schema(
        summary="Move a queued turn to the front of its thread's queue", request=None,
        responses={200: TurnSerializer, 409: NOT_QUEUED}, operation_id="turns_promote",
    )  # fmt: skip
    def post(self, request: Request, turn_id: str) -> Response:
        """promote_queued_turn: the queued turn moves to the front of its thread's queue;
        409 for a turn that is not queued."""
        turn = self.turn()
        return Response(_detail(turn_promote_queued(thread=turn.thread, turn=turn)))


turn_urlpatterns = [
    path("turns/<uuid:turn_id>", TurnDetailView.as_view(), name="turn-detail"),
    path("turns/<uuid:turn_id>/cancel", TurnCancelView.as_view(), name="turn-cancel"),
    path("turns/<uuid:turn_id>/promote", TurnPromoteView.as_view(), name="turn-promote"),
]
urlpatterns = [
    path("turns", ThreadTurnsView.as_view(), name="thread-turns"),
]
