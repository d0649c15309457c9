"""The answers several routes of a thread's work share: a message, a turn, an action and a
variable-bootstrap request, as the services shape them (``message_answer``, ``turn_json``,
``action_json``, ``variable_request_json``). The serializers document those shapes for the
OpenAPI schema; the views answer the services' dicts as they are."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from common.schema import microseconds
from threads.models import (
    ActionKind,
    ActionStatus,
    MessageRole,
    MessageStatus,
    RunStatus,
    TurnKind,
    TurnSource,
    TurnStrategy,
)
from threads.services.inbox import QUEUEABLE_ROLES

SIDES = ("a", "b")


class ToolCallSerializer(serializers.Serializer[Any]):
    """A tool call of an answer, as the `tool.started` event shows it."""

    id = serializers.CharField(help_text="the call's id; a tool result's `tool_call_id`")
    name = serializers.CharField(help_text="the tool called")
    arguments = serializers.DictField(help_text="the arguments, as an object")


class MessageSerializer(serializers.Serializer[Any]):
    """A message of a thread. Messages nested under a tool call (a subprompt's) have a
    `parent_id` and a `depth` above 0."""

    id = serializers.UUIDField()
    seq = serializers.IntegerField(help_text="the message's place in its thread, from 1")
    role = serializers.ChoiceField(choices=MessageRole.choices)
    content = serializers.CharField(allow_null=True)
    name = serializers.CharField(allow_null=True, help_text="the tool's name, on a tool result")
    tool_calls = ToolCallSerializer(
        many=True, allow_null=True, help_text="an answer's tool calls; null when it made none"
    )
    tool_call_id = serializers.CharField(
        allow_null=True, help_text="on a tool result: the call it answers"
    )
    tool_status = serializers.CharField(
        allow_null=True, help_text="on a tool result: `success` or `error`"
    )
    created_at = microseconds("when it was stored")
    parent_id = serializers.UUIDField(
        allow_null=True, help_text="the message whose tool call it is nested under"
    )
    depth = serializers.IntegerField(help_text="0 at the top level")
    silent = serializers.BooleanField(help_text="kept out of the model's context and of lists")
    status = serializers.ChoiceField(
        choices=MessageStatus.choices, help_text="`pending` while a model answer is streamed"
    )
    side = serializers.ChoiceField(
        choices=SIDES, allow_null=True, help_text="the side of the agent that wrote it"
    )
    metadata = serializers.DictField()
    attachments = serializers.ListField(
        child=serializers.DictField(),
        help_text='file references: `{id, type: "file", path, name, mimeType, size, width?, '
        "height?}`",
    )


class QueuedMessageSerializer(serializers.Serializer[Any]):
    """A queued message as it will be stored once its turn takes it."""

    id = serializers.UUIDField(help_text="the id the message will have")
    role = serializers.ChoiceField(choices=QUEUEABLE_ROLES)
    content = serializers.CharField(allow_null=True)
    attachments = serializers.ListField(child=serializers.DictField())
    silent = serializers.BooleanField()
    metadata = serializers.DictField()
    status = serializers.CharField(help_text="`queued`")
    created_at = microseconds("when it was queued")


class TurnSerializer(serializers.Serializer[Any]):
    """A turn: one submitted input cycle of a thread (a message, a `continue`, a queued tool
    call, a fired effect). A thread runs its turns one at a time, in queue order."""

    id = serializers.UUIDField()
    thread_id = serializers.UUIDField()
    kind = serializers.ChoiceField(choices=TurnKind.choices, help_text="what the input asks")
    # Named as the API shows it; DRF moves declared fields off the class, so it does not
    # shadow Field.source at run time (only the stubs see a clash).
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=TurnSource.choices, help_text="who submitted it"
    )
    strategy = serializers.ChoiceField(
        choices=TurnStrategy.choices, help_text="what it did to a turn already running"
    )
    status = serializers.ChoiceField(choices=RunStatus.choices)
    input = serializers.DictField(help_text="the input, as submitted")
    metadata = serializers.DictField()
    created_at = microseconds("when it was queued")
    started_at = microseconds("when it started running", allow_null=True)
    ended_at = microseconds("when it ended", allow_null=True)
    outcome = serializers.CharField(
        allow_null=True, help_text="why it ended (`completed`, `removed`, a stop reason)"
    )
    error = serializers.CharField(allow_null=True)
    usage = serializers.DictField(
        allow_null=True, help_text="the tokens and cost of its model calls, once it ended"
    )
    joined_turn_id = serializers.UUIDField(
        allow_null=True, help_text="the running turn this input joined (drained into it)"
    )
    user = serializers.CharField(
        allow_null=True,
        help_text="the end user it is for (the body's `user`, else the thread's `user_id`); "
        "null: none",
    )
    message_ids = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        help_text="the messages it wrote, in order (on a turn read by itself or in a list)",
    )
    routing_limit_summary = serializers.DictField(
        required=False,
        help_text="on a turn read by itself: where the budgets its calls spend against stand "
        "(`cost_state` within|near|exhausted; `budgets`: each one's limit, spent, reserved "
        "and remaining), what it waits for (`waiting`: reason budget|quota, the budget, "
        "`retry_at`), and the tenant's quotas (docs/usage.md)",
    )


class ActionSerializer(serializers.Serializer[Any]):
    """A person's decision a turn waits for: the approval of a tool call (`approval`), or
    input a tool asked for (`input`)."""

    id = serializers.UUIDField()
    thread_id = serializers.UUIDField()
    turn_id = serializers.UUIDField()
    kind = serializers.ChoiceField(choices=ActionKind.choices)
    status = serializers.ChoiceField(choices=ActionStatus.choices)
    tool_call_id = serializers.CharField()
    name = serializers.CharField(help_text="the tool's name")
    arguments = serializers.DictField(help_text="the call's arguments, as the model wrote them")
    decisions = serializers.ListField(
        child=serializers.CharField(), help_text="what a response may decide"
    )
    rule = serializers.DictField(allow_null=True, help_text="the permission rule that asked")
    prompt = serializers.CharField(allow_null=True, help_text="an input request's question")
    schema = serializers.DictField(
        allow_null=True,
        help_text="what an answer must satisfy: the tool's parameters (`edit`), the requested "
        "data (`answer`)",
    )
    on_expiry = serializers.CharField(help_text="`deny` or `allow`: what expiry decides")
    response = serializers.DictField(
        allow_null=True, help_text="the decision given: `{decision, reason?, arguments?, data?}`"
    )
    responder = serializers.CharField(allow_null=True, help_text="who responded")
    created_at = microseconds("when it was opened")
    expires_at = microseconds("when it expires unanswered")
    resolved_at = microseconds("when it was resolved", allow_null=True)
    endpoint = serializers.CharField(help_text="where to respond")


class VariableRequestSerializer(serializers.Serializer[Any]):
    """What a deferred subagent requires before it can start, and what is still missing
    (names only, never values)."""

    request_id = serializers.UUIDField()
    kind = serializers.CharField(help_text="`variables`")
    parent_thread_id = serializers.UUIDField()
    agent_name = serializers.CharField(help_text="the subagent's agent")
    registry_agent_name = serializers.CharField(help_text="the relationship that spawns it")
    # As Turn.source: the stubs see a clash with Field.required, DRF does not.
    required = serializers.ListField(child=serializers.CharField())  # type: ignore[assignment]
    missing = serializers.ListField(child=serializers.CharField())
    status = serializers.ChoiceField(choices=["pending", "completed", "expired"])
    child_thread_id = serializers.UUIDField(
        allow_null=True, help_text="the subagent's thread, once completed"
    )
    endpoint = serializers.CharField(help_text="where to provide the variables")
    created_at = microseconds("when it was opened")
    expires_at = microseconds("when it expires")
