"""A thread's actions (the decisions its turns wait for): ``GET /api/v1/threads/{id}/actions``,
``GET …/actions/{action_id}`` and ``POST …/actions/{action_id}`` (respond_action)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from common.audit import AuditAction
from common.inputs import StrictInput
from common.pagination import PAGE_PARAMETERS, paginate
from common.schema import error_responses, page_of
from tenancy.auditing import audit_by
from threads.api.base import ThreadScopedView
from threads.api.run_outputs import ActionSerializer
from threads.models import ActionStatus
from threads.services.actions import (
    ANSWERS,
    ActionResolved,
    action_get,
    action_json,
    action_respond,
    actions_of,
)


class ActionListQuery(serializers.Serializer[Any]):
    status = serializers.ChoiceField(
        choices=ActionStatus.choices, required=False,
        help_text="only the actions in this status: `pending` lists what waits for a person",
    )  # fmt: skip


class ActionAnswer(StrictInput):
    """A response to an action: `approve`, `deny` or `edit` an approval; `answer` or `deny`
    an input request."""

    # Documents the body; action_respond checks it (naming the field of a problem).

    decision = serializers.ChoiceField(
        choices=ANSWERS,
        help_text="approve, deny or edit an approval; answer or deny an input request",
    )
    reason = serializers.CharField(required=False, help_text="deny: what the model reads")
    arguments = serializers.DictField(
        required=False, help_text="edit: the call's new arguments (checked against the tool)"
    )
    # Collected into the declared fields by the metaclass: Serializer.data stays as it is.
    data = serializers.DictField(  # type: ignore[assignment]
        required=False, help_text="answer: the input (checked against the requested schema)"
    )


def _responder(view: ThreadScopedView) -> str:
    principal = view.principal
    if principal.api_key is not None:
        return f"api_key:{principal.api_key.prefix}"
    return f"user:{principal.user.get_username()}" if principal.user is not None else ""


RESPOND_DESCRIPTION = (
    "`approve` (the call runs), `deny` (with a `reason` the model reads as the call's result) "
    "or `edit` (the call runs with `arguments`, checked against the tool's parameters) an "
    "approval; `answer` (`data`, checked against the requested schema) or `deny` an input "
    "request. The turn then resumes on any worker. 409 when the action was answered, expired "
    "or cancelled already."
)


class ActionsView(ThreadScopedView):
    @extend_schema(
        summary="List a thread's actions", description="Newest first.",
        parameters=[ActionListQuery, *PAGE_PARAMETERS], responses=page_of(ActionSerializer),
        operation_id="thread_actions_list",
    )  # fmt: skip
    def get(self, request: Request, thread_id: str) -> Response:
        """The thread's actions, newest first; ``?status=pending`` lists what waits for a
        person."""
        query = ActionListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = actions_of(thread=self.thread(), status=query.validated_data.get("status"))
        return paginate(request, rows, action_json, view=self)


class ActionView(ThreadScopedView):
    @extend_schema(
        summary="Get an action", responses=ActionSerializer,
        operation_id="thread_actions_retrieve",
    )  # fmt: skip
    def get(self, request: Request, thread_id: str, action_id: str) -> Response:
        """The action: what waits (a tool call's approval, or input a tool asked for), the
        decisions it takes, when it expires, and once resolved how and by whom."""
        return Response(action_json(action_get(thread=self.thread(), action_id=action_id)))

    @extend_schema(
        summary="Respond to an action", description=RESPOND_DESCRIPTION, request=ActionAnswer,
        responses={200: ActionSerializer, **error_responses(409)},
        operation_id="thread_actions_respond",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str, action_id: str) -> Response:
        """respond_action: ``approve`` (the call runs), ``deny`` (with a ``reason`` the model
        reads as the call's result) or ``edit`` (the call runs with ``arguments``, checked
        against the tool's parameters) an approval; ``answer`` (``data``, checked against
        the requested schema) or ``deny`` an input request. The turn then resumes on any
        worker. 409 when the action was answered, expired or cancelled already."""
        late: ActionResolved | None = None
        with transaction.atomic():
            try:
                answered = action_respond(
                    thread=self.thread(), action_id=action_id, body=request.data,
                    responder=_responder(self),
                )  # fmt: skip
            except ActionResolved as refused:  # an expiry it committed must stay committed
                late = refused
            else:
                audit_by(
                    self.principal, AuditAction.ACTION_ANSWERED, "action", answered.pk,
                    {"thread_id": str(answered.thread_id), "decision": request.data["decision"]},
                )  # fmt: skip
        if late is not None:
            raise late
        return Response(action_json(answered))


urlpatterns = [
    path("actions", ActionsView.as_view(), name="thread-actions"),
    path("actions/<uuid:action_id>", ActionView.as_view(), name="thread-action"),
]
