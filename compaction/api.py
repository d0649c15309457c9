"""``/api/v1/threads/{id}/compactions``: the thread's compactions (list and get, any role)
and reverting the active one (``…/{compaction_id}/revert``, a write).

The list is in the list shape, newest first, keyset on the creation time; ``?side=`` and
``?status=`` filter it, and any other query parameter is a 400 naming it.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import ValidationFailed
from common.inputs import StrictInput
from common.pagination import CURSOR, LIMIT, PAGE_PARAMETERS, paginate
from common.schema import error_response, microseconds, page_of
from compaction.compact import compaction_json
from compaction.models import CompactionStatus, Tier, Trigger
from compaction.services import Revert, compaction_get, compaction_revert, compactions_of
from threads.api.base import ThreadScopedView

SIDES = ["a", "b"]


class CompactionSummarySerializer(serializers.Serializer[Any]):
    """The structured summary of the range, updated with each compaction that extends
    another (empty when nothing was summarized)."""

    intent = serializers.CharField(required=False, help_text="what the user wants overall")
    decisions = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="what was decided and why"
    )
    state = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="facts that hold now"
    )
    artifacts = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="what was produced, and where"
    )
    open_items = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="what is not finished"
    )


class CompactionSerializer(serializers.Serializer[Any]):
    """An overlay of one side's context: the model is sent the summary of messages
    `from_seq` to `to_seq` (none when `to_seq` is 0) in their place, and tool results up to
    `cleared_through` longer than `cleared_over` characters as stubs. The first user
    message and the last one stay verbatim. At most one per side is `active`; a newer one
    `extends` it and it becomes `superseded`; `reverted` is undone."""

    id = serializers.UUIDField()
    thread_id = serializers.UUIDField()
    side = serializers.ChoiceField(choices=SIDES, help_text="the side whose context it is")
    status = serializers.ChoiceField(choices=CompactionStatus.choices)
    tier = serializers.ChoiceField(
        choices=Tier.choices,
        help_text="`tool_results`: large tool results cleared; `summary`: the range "
        "summarized; `truncation`: the range left out (summarizing failed)",
    )
    trigger = serializers.ChoiceField(
        choices=Trigger.choices,
        help_text="`proactive`: before a step; `reactive`: after a context-length error; "
        "`idle`: after a turn",
    )
    from_seq = serializers.IntegerField(help_text="the first message summarized (0: none)")
    to_seq = serializers.IntegerField(help_text="the last message summarized (0: none)")
    first_user_seq = serializers.IntegerField(help_text="the first user message, kept verbatim")
    cleared_through = serializers.IntegerField(
        help_text="tool results up to this seq are cleared (0: none)"
    )
    cleared_over = serializers.IntegerField(help_text="when longer than this many characters")
    summary = CompactionSummarySerializer()
    summary_text = serializers.CharField(help_text="the summary as the model is shown it")
    model = serializers.CharField(allow_null=True, help_text="the model that summarized")
    tokens_before = serializers.IntegerField(help_text="the context's tokens before")
    tokens_after = serializers.IntegerField(help_text="the context's tokens after (estimated)")
    input_tokens = serializers.IntegerField(help_text="what summarizing read")
    output_tokens = serializers.IntegerField(help_text="what summarizing wrote")
    cost_micros = serializers.IntegerField(
        allow_null=True, help_text="what summarizing cost, in millionths of a USD (null: unknown)"
    )
    policy_version = serializers.CharField(help_text="the compaction policy's version")
    extends = serializers.UUIDField(allow_null=True, help_text="the compaction it superseded")
    turn_id = serializers.UUIDField(allow_null=True, help_text="the turn that compacted")
    error = serializers.CharField(allow_null=True, help_text="why summarizing failed")
    created_at = microseconds("when it was written")
    reverted_at = microseconds("when it was reverted", allow_null=True)


class CompactionRevertSerializer(serializers.Serializer[Any]):
    reverted = CompactionSerializer(help_text="the compaction, now `reverted`")
    active = CompactionSerializer(
        allow_null=True,
        help_text="the compaction it extended, `active` again; null when there is none (the "
        "side's context is the original messages)",
    )


class CompactionListQuery(serializers.Serializer[Any]):
    side = serializers.ChoiceField(choices=SIDES, required=False)
    status = serializers.ChoiceField(choices=CompactionStatus.choices, required=False)


class CompactionRevertInput(StrictInput):
    """No fields: the body is empty or ``{}``."""


LIST_PARAMETERS = (LIMIT, CURSOR, *CompactionListQuery().fields)


def revert_json(revert: Revert) -> dict[str, Any]:
    return {
        "reverted": compaction_json(revert.reverted),
        "active": compaction_json(revert.active) if revert.active is not None else None,
    }


class CompactionListView(ThreadScopedView):
    @extend_schema(
        summary="List a thread's compactions",
        description="Newest first. `side` and `status` filter; any other query parameter is "
        "a 400 naming it.",
        parameters=[
            *PAGE_PARAMETERS,
            OpenApiParameter("side", str, enum=SIDES, description="only this side's"),
            OpenApiParameter(
                "status", str, enum=CompactionStatus.values, description="only those in it"
            ),
        ],
        responses=page_of(CompactionSerializer),
        operation_id="thread_compactions_list",
    )
    def get(self, request: Request, thread_id: str) -> Response:
        for name in request.query_params:
            if name not in LIST_PARAMETERS:
                raise ValidationFailed(
                    f"unknown query parameter {name[:100]!r} (known: {', '.join(LIST_PARAMETERS)})",
                    field=name,
                )
        query = CompactionListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = compactions_of(thread=self.thread(), **query.validated_data)
        return paginate(request, rows, compaction_json, view=self)


class CompactionDetailView(ThreadScopedView):
    @extend_schema(
        summary="Get a thread's compaction",
        responses=CompactionSerializer,
        operation_id="thread_compactions_retrieve",
    )
    def get(self, request: Request, thread_id: str, compaction_id: str) -> Response:
        return Response(
            compaction_json(compaction_get(thread=self.thread(), compaction_id=compaction_id))
        )


class CompactionRevertView(ThreadScopedView):
    @extend_schema(
        summary="Revert a thread's active compaction",
        description="The side's context sees the original messages of its range again from "
        "the thread's next step, or the compaction it extended, which is active again. The "
        "body is empty or `{}`; any key is a 400 naming it. 409 for a compaction that is not "
        "active (the message names the side's active one). One `thread.updated` event "
        '(`fields: ["compactions"]`) is published.',
        request=None,
        responses={
            200: CompactionRevertSerializer,
            409: error_response(409, "The compaction is not its side's active one"),
        },
        operation_id="thread_compactions_revert",
    )
    def post(self, request: Request, thread_id: str, compaction_id: str) -> Response:
        CompactionRevertInput(data=request.data).is_valid(raise_exception=True)
        revert = compaction_revert(thread=self.thread(), compaction_id=compaction_id)
        return Response(revert_json(revert))
