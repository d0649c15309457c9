"""``POST /api/v1/permissions/evaluate``: what the tenant's permission rules decide for a
tool call, without running it (evaluate_permission as a dry run).

It lives with the threads because a call is evaluated as a thread's prompt would make it
(the tools the prompt offers, the engine's decision function), which the agents app below
cannot see.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.urls import re_path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.inputs import StrictInput
from common.schema import error_responses
from tenancy.models import Role
from tenancy.viewsets import request_principal
from threads.api.inventory import KIND_HELP, PermissionOutput, permission_json
from threads.runtime.inventory import PermissionEvaluation, permission_evaluate
from threads.services.threads import thread_get

EVALUATE_DESCRIPTION = (
    "What the tenant's permission rules decide for a call of `tool` with `arguments`, "
    "without running it: the decision the engine makes with the same function before the "
    "call (its `permission.evaluated` event carries the same `decision` and `rule`). The "
    "rules weighed are the registry tool's default, the prompt's `tools[]` entry's "
    "`approval` and the tenant's rules for the agent and tool; the most restrictive that "
    "applies wins (`deny` over `ask` over `allow`), none applying is `allow`. The call is "
    "one of `thread_id`'s thread (its agent), or of a new thread of `agent`; `prompt` (one of "
    "the agent's prompts, default its side A prompt) is the prompt that makes it, and "
    "`offered` says whether that prompt offers the tool (a call of a tool it does not offer "
    "fails whatever the decision). Without `thread_id` and `agent`, only the registry "
    "tool's default and the tenant's rules for every agent are weighed, and `offered` says "
    "whether the tenant has the tool. Another tenant's `thread_id` is a 404. Nothing runs "
    "and nothing is recorded."
)


class PermissionEvaluateInput(StrictInput):
    thread_id = serializers.UUIDField(required=False, help_text="the thread making the call")
    agent = serializers.CharField(
        required=False, max_length=200, help_text="the agent of a new thread making it"
    )
    prompt = serializers.CharField(
        required=False, max_length=200, help_text="the agent's prompt making it"
    )
    tool = serializers.CharField(max_length=200, help_text="the tool called")
    arguments = serializers.DictField(
        required=False, default=dict, help_text="the call's arguments (default `{}`)"
    )


class PermissionEvaluationOutput(PermissionOutput):
    """evaluate_permission: what the rules decide for a call (see the description)."""

    agent = serializers.CharField(allow_null=True)
    prompt = serializers.CharField(allow_null=True)
    tool = serializers.CharField()
    kind = serializers.CharField(allow_null=True, help_text=f"{KIND_HELP}; null: unknown")
    offered = serializers.BooleanField()


def evaluation_json(evaluation: PermissionEvaluation) -> dict[str, Any]:
    return {
        **permission_json(evaluation.permission),
        "agent": evaluation.agent,
        "prompt": evaluation.prompt,
        "tool": evaluation.tool,
        "kind": evaluation.kind,
        "offered": evaluation.offered,
    }


class PermissionEvaluateView(APIView):
    write_role: ClassVar[Role] = Role.READ_ONLY  # a dry run changes nothing

    @extend_schema(
        summary="Evaluate a tool call's permission (dry run)",
        description=EVALUATE_DESCRIPTION,
        request=PermissionEvaluateInput,
        responses={200: PermissionEvaluationOutput, **error_responses(404)},
        operation_id="permissions_evaluate",
    )
    def post(self, request: Request) -> Response:
        payload = PermissionEvaluateInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        tenant = request_principal(request).tenant
        thread_id = data.get("thread_id")
        evaluation = permission_evaluate(
            tenant=tenant, tool=data["tool"], arguments=data["arguments"],
            thread=thread_get(tenant=tenant, thread_id=thread_id) if thread_id else None,
            agent=data.get("agent"), prompt=data.get("prompt"),
        )  # fmt: skip
        return Response(evaluation_json(evaluation))


urlpatterns = [
    re_path(r"^permissions/evaluate/?$", PermissionEvaluateView.as_view(),
            name="permissions-evaluate"),
]  # fmt: skip
