"""A thread's subagents: ``GET /api/v1/threads/{id}/children`` (its registry entries) and
the variable-bootstrap flow, ``GET``/``POST /api/v1/threads/{id}/variables/{request_id}``
(spec runtime §7.5, DIGEST §11)."""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from common.inputs import StrictInput
from common.pagination import PAGE_PARAMETERS, paginate
from common.schema import error_responses, microseconds, page_of
from threads.api.base import ThreadScopedView
from threads.api.run_outputs import VariableRequestSerializer
from threads.models import RunStatus, SubagentLink
from threads.runtime.bootstrap import variable_request_complete, variable_request_get
from threads.services.subagents import link_json
from threads.services.variable_requests import variable_request_json


class ThreadChildSerializer(serializers.Serializer[Any]):
    """A subagent of a thread: its entry in the thread's registry, and its own thread's
    status."""

    reference = serializers.UUIDField(help_text="the subagent's thread")
    relationship = serializers.CharField(help_text="the relationship it was created by")
    owner = serializers.CharField(help_text="the side of the parent that owns it: `a` or `b`")
    name = serializers.CharField(help_text="its agent")
    title = serializers.CharField(help_text="its label")
    thread_name = serializers.CharField(help_text="its label")
    description = serializers.CharField()
    blocking = serializers.BooleanField(help_text="the parent waits for its result")
    resumable = serializers.BooleanField()
    receives_messages = serializers.CharField(
        help_text="the side of it the parent's messages reach: `side_a` or `side_b`"
    )
    parent_communication = serializers.CharField(help_text="how it reports to the parent")
    status = serializers.CharField(help_text="the status text it sets for its parent")
    initial_arguments = serializers.JSONField(help_text="any JSON, or null")
    spawn_group_id = serializers.CharField(
        allow_null=True, help_text="the subagents created together with it"
    )
    created_at = microseconds("when it was created")
    updated_at = microseconds("when its entry last changed")
    terminated_at = microseconds("when it was terminated", allow_null=True)
    thread_status = serializers.ChoiceField(
        choices=RunStatus.choices, help_text="its thread's stored status"
    )


class VariableRequestCompletedSerializer(serializers.Serializer[Any]):
    """A completed variable request: the subagent's thread exists and has started."""

    request_id = serializers.UUIDField()
    child_thread_id = serializers.UUIDField()
    status = serializers.CharField(help_text="`success`")


def _child_json(link: SubagentLink) -> dict[str, Any]:
    return {**link_json(link), "thread_status": link.child.status}


class ChildrenView(ThreadScopedView):
    @extend_schema(
        summary="List a thread's subagents", description="Oldest first.",
        parameters=PAGE_PARAMETERS, responses=page_of(ThreadChildSerializer),
        operation_id="thread_children_list",
    )  # fmt: skip
    def get(self, request: Request, thread_id: str) -> Response:
        """The thread's subagents, oldest first: each registry entry with the child
        thread's own status (one query per page)."""
        rows = (
            SubagentLink.objects.filter(thread_id=self.thread().pk)
            .select_related("child")
            .order_by("created_at", "id")
        )
        return paginate(request, rows, _child_json, view=self)


class StringValue(serializers.CharField):
    """A JSON string as it is: a number is refused, not turned into text."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        value: str = super().to_internal_value(data)
        return value


class VariableRequestInput(StrictInput):
    env = serializers.DictField(
        child=StringValue(allow_blank=True, trim_whitespace=False),
        help_text="the missing variables, by name",
    )


class VariableRequestView(ThreadScopedView):
    @extend_schema(
        summary="Get a subagent's variable request", responses=VariableRequestSerializer,
        operation_id="thread_variables_retrieve",
    )  # fmt: skip
    def get(self, request: Request, thread_id: str, request_id: str) -> Response:
        """What a deferred subagent requires and what is still missing (names only)."""
        found = variable_request_get(thread=self.thread(), request_id=request_id)
        return Response(variable_request_json(found))

    @extend_schema(
        summary="Provide a subagent's missing variables and start it",
        description="The variables are stored encrypted in the new subagent's env and it "
        "starts at once. 400 names what is still missing, 409 when the request was completed "
        "already, 410 once it expired.",
        request=VariableRequestInput,
        responses={200: VariableRequestCompletedSerializer, **error_responses(409, 410)},
        operation_id="thread_variables_complete",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str, request_id: str) -> Response:
        """Provide the missing variables (``{"env": {"NAME": "value"}}``): they are stored
        encrypted in the new child's env and the child starts at once. 400 names what is
        still missing, 409 when the request was completed already, 410 once it expired."""
        payload = VariableRequestInput(data=request.data)
        payload.is_valid(raise_exception=True)
        return Response(
            variable_request_complete(
                thread=self.thread(), request_id=request_id, env=payload.validated_data["env"]
            )
        )


urlpatterns = [
    path("children", ChildrenView.as_view(), name="thread-children"),
    path("variables/<uuid:request_id>", VariableRequestView.as_view(), name="thread-variables"),
]
