"""A thread's subagents: ``GET /api/v1/threads/{id}/children`` (its registry entries) and
the variable-bootstrap flow, ``GET``/``POST /api/v1/threads/{id}/variables/{request_id}``
(spec runtime §7.5, DIGEST §11)."""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from common.schema import error_responses
from threads.api.base import ThreadScopedView
from threads.models import Thread
from threads.runtime.bootstrap import variable_request_complete, variable_request_get
from threads.services.subagents import children_of, link_json
from threads.services.variable_requests import variable_request_json


class ChildrenView(ThreadScopedView):
    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="thread_children_list")
    def get(self, request: Request, thread_id: str) -> Response:
        """The thread's subagents, oldest first: each registry entry (reference = the child
        thread's id, relationship, label, status, blocking, parent communication, initial
        arguments, timestamps) with the child thread's own status."""
        links = children_of(thread=self.thread())
        statuses = dict(
            Thread.objects.filter(pk__in=[link.child_id for link in links]).values_list(
                "id", "status"
            )
        )
        children = [
            {**link_json(link), "thread_status": statuses.get(link.child_id)} for link in links
        ]
        return Response({"children": children, "total": len(children)})


class StringValue(serializers.CharField):
    """A JSON string as it is: a number is refused, not turned into text."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        value: str = super().to_internal_value(data)
        return value


class VariableRequestInput(serializers.Serializer[Any]):
    env = serializers.DictField(
        child=StringValue(allow_blank=True, trim_whitespace=False),
        help_text="the missing variables, by name",
    )


class VariableRequestView(ThreadScopedView):
    @extend_schema(
        responses=OpenApiTypes.OBJECT,
        operation_id="thread_variables_retrieve",
    )
    def get(self, request: Request, thread_id: str, request_id: str) -> Response:
        """What a deferred subagent requires and what is still missing (names only)."""
        found = variable_request_get(thread=self.thread(), request_id=request_id)
        return Response(variable_request_json(found))

    @extend_schema(
        request=VariableRequestInput,
        responses={200: OpenApiTypes.OBJECT, **error_responses(409, 410)},
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
