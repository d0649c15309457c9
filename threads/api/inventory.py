"""``GET /api/v1/threads/{id}/tools``: the tool inventory a side's prompt offers the model
(``threads.runtime.inventory``), each tool with what the permission rules decide for it;
``GET /api/v1/turns/{id}/tools``: the catalogs a turn's model calls were offered."""

from __future__ import annotations

from typing import Any, get_args

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agents.permissions import DECISIONS, Rule
from common.errors import ValidationFailed
from threads.api.base import ThreadScopedView, TurnScopedView
from threads.runtime.definitions import ToolKind
from threads.runtime.inventory import InventoryTool, ToolInventory, ToolPermission, tool_inventory
from threads.services.events import turn_catalogs

# A plain string in the schema: an enum would collide with the other `kind` enums.
KIND_HELP = "what the tool is: " + ", ".join(f"`{kind}`" for kind in get_args(ToolKind))

INVENTORY_DESCRIPTION = (
    "The tools the prompt offers the model on this thread, in the order the model sees them, "
    "as a turn would build them now: `optional` entries gated by the env a turn reads, "
    "resumable subagents replaced by the lifecycle tools (`subagent_create`, "
    "`subagent_message` while a live one exists, `subagents`). `side` (default `a`) picks the "
    "side's prompt; `prompt` names another prompt of the agent (a subprompt). Each tool has "
    "the decision of the permission rules for a call of it with no arguments, made as the "
    "engine makes it, and the rules weighed; `depends_on_arguments` is true when one of "
    "them has a condition, so a call's arguments may change the decision (ask "
    "`POST /api/v1/permissions/evaluate` with them). Tools the runtime adds on its own "
    "(`recall` while the side's context is compacted) are listed first, as a step gets "
    "them. Any other query parameter is a 400 "
    "naming it."
)


class RuleOutput(serializers.Serializer[Rule]):
    """A permission rule as the engine weighs it (the `rule` of a `permission.evaluated`
    event)."""

    decision = serializers.ChoiceField(choices=DECISIONS)
    # Collected into the declared fields by the metaclass: Field.source stays as it is.
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=["registry", "prompt", "tenant"],
        help_text="where it is declared: the registry tool's default, the prompt's `tools[]` "
        "entry, or the tenant's permission rules",
    )
    when = serializers.JSONField(required=False, help_text="its condition on the arguments")
    id = serializers.UUIDField(required=False, help_text="a tenant rule's id")
    on_expiry = serializers.ChoiceField(
        choices=["deny", "allow"], required=False, help_text="ask: an unanswered request's end"
    )
    expires_in = serializers.IntegerField(required=False, help_text="ask: seconds to answer")


class PermissionOutput(serializers.Serializer[Any]):
    """What the rules decide for a call."""

    decision = serializers.ChoiceField(choices=DECISIONS)
    rule = RuleOutput(allow_null=True, help_text="the rule that decided; null: none applied")
    source = serializers.CharField(  # type: ignore[assignment]
        allow_null=True, help_text="the deciding rule's source (null: none applied)"
    )
    depends_on_arguments = serializers.BooleanField(
        help_text="a weighed rule has a condition on the call's arguments"
    )
    rules = RuleOutput(many=True, help_text="every rule weighed for the tool, in weighing order")


class InventoryToolOutput(serializers.Serializer[Any]):
    name = serializers.CharField()
    kind = serializers.CharField(help_text=KIND_HELP)
    description = serializers.CharField(allow_blank=True)
    parameters = serializers.DictField(
        allow_null=True, help_text="the JSON schema of its arguments"
    )
    permission = PermissionOutput(help_text="for a call with no arguments")


class ToolInventoryOutput(serializers.Serializer[Any]):
    """get_tool_inventory: the tools a side's prompt offers on the thread."""

    thread_id = serializers.UUIDField()
    agent = serializers.CharField()
    side = serializers.ChoiceField(choices=["a", "b"])
    prompt = serializers.CharField()
    tools = InventoryToolOutput(many=True)


class ToolInventoryQuery(serializers.Serializer[Any]):
    side = serializers.ChoiceField(choices=["a", "b"], default="a")
    prompt = serializers.CharField(required=False, max_length=200)


QUERY_PARAMETERS = tuple(ToolInventoryQuery().fields)


def permission_json(permission: ToolPermission) -> dict[str, Any]:
    rule = permission.rule
    return {
        "decision": permission.decision,
        "rule": rule.as_json() if rule is not None else None,
        "source": rule.source if rule is not None else None,
        "depends_on_arguments": permission.depends_on_arguments,
        "rules": [weighed.as_json() for weighed in permission.rules],
    }


def _tool_json(tool: InventoryTool) -> dict[str, Any]:
    return {
        "name": tool.name,
        "kind": tool.kind,
        "description": tool.description,
        "parameters": dict(tool.parameters) if tool.parameters is not None else None,
        "permission": permission_json(tool.permission),
    }


def inventory_json(*, thread_id: object, inventory: ToolInventory) -> dict[str, Any]:
    return {
        "thread_id": str(thread_id),
        "agent": inventory.agent,
        "side": inventory.side,
        "prompt": inventory.prompt,
        "tools": [_tool_json(tool) for tool in inventory.tools],
    }


class ToolInventoryView(ThreadScopedView):
    @extend_schema(
        summary="List the tools a thread's prompt offers, with their permissions",
        description=INVENTORY_DESCRIPTION,
        parameters=[
            OpenApiParameter("side", str, enum=["a", "b"], description="default `a`"),
            OpenApiParameter(
                "prompt", str, description="a prompt of the agent (default: the side's)"
            ),
        ],
        responses=ToolInventoryOutput,
        operation_id="thread_tools_list",
    )
    def get(self, request: Request, thread_id: str) -> Response:
        for name in request.query_params:
            if name not in QUERY_PARAMETERS:
                raise ValidationFailed(
                    f"unknown query parameter {name[:100]!r} "
                    f"(known: {', '.join(QUERY_PARAMETERS)})",
                    field=name,
                )
        query = ToolInventoryQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        thread = self.thread()
        inventory = tool_inventory(
            thread=thread, side=query.validated_data["side"],
            prompt=query.validated_data.get("prompt"),
        )  # fmt: skip
        return Response(inventory_json(thread_id=thread.pk, inventory=inventory))


class CatalogToolOutput(serializers.Serializer[Any]):
    name = serializers.CharField()
    kind = serializers.CharField(help_text=KIND_HELP)
    description = serializers.CharField()
    parameters = serializers.JSONField(allow_null=True, help_text="its JSON Schema")


class CatalogOutput(serializers.Serializer[Any]):
    sequence = serializers.IntegerField(help_text="its `tool.catalog.resolved` event's")
    step_id = serializers.CharField(allow_null=True)
    side = serializers.ChoiceField(choices=["a", "b"])
    prompt = serializers.CharField()
    digest = serializers.CharField(help_text="names the catalog: equal digests, equal tools")
    tools = CatalogToolOutput(many=True)


class TurnCatalogsOutput(serializers.Serializer[Any]):
    turn_id = serializers.UUIDField()
    catalogs = CatalogOutput(many=True)


TURN_TOOLS_DESCRIPTION = (
    "The tools this turn's model calls were offered, as they were offered: one catalog per "
    "side and prompt that called a model, and one more each time a later call's catalog "
    "differed, oldest first (each is a `tool.catalog.resolved` event of the turn). A call "
    "offered no tools publishes no catalog. What the same prompt offers now, with the "
    "permission decisions, is `GET /api/v1/threads/{thread_id}/tools`."
)


class TurnToolsView(TurnScopedView):
    @extend_schema(
        summary="List the tool catalogs a turn's model calls were offered",
        description=TURN_TOOLS_DESCRIPTION, responses=TurnCatalogsOutput,
        operation_id="turn_tools_list", tags=["tools"],
    )  # fmt: skip
    def get(self, request: Request, turn_id: str) -> Response:
        turn = self.turn()
        catalogs = [
            {"sequence": event.sequence, "step_id": event.step_id or None,
             "side": event.payload["side"], "prompt": event.payload["prompt"],
             "digest": event.payload["digest"], "tools": event.payload["tools"]}
            for event in turn_catalogs(turn=turn)
        ]  # fmt: skip
        return Response({"turn_id": str(turn.pk), "catalogs": catalogs})


urlpatterns = [
    path("tools", ToolInventoryView.as_view(), name="thread-tools"),
]
turn_urlpatterns = [
    path("turns/<uuid:turn_id>/tools", TurnToolsView.as_view(), name="turn-tools"),
]
