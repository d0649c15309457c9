"""``GET /api/v1/threads/{id}/storage``: what a thread's rows take, by kind (any role)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import ValidationFailed
from retention.storage import ThreadStorage, Usage, thread_storage
from threads.api.base import ThreadScopedView


class UsageOutput(serializers.Serializer[Any]):
    count = serializers.IntegerField(help_text="rows")
    bytes = serializers.IntegerField(help_text="bytes they hold (see the report's description)")


class ThreadStorageOutput(serializers.Serializer[Any]):
    """What a thread's own rows take (a child thread has its own report)."""

    thread_id = serializers.UUIDField()
    messages = UsageOutput(
        help_text="bytes: the text of content, reasoning, tool calls and attachment references"
    )
    files = UsageOutput(help_text="files (not directories); bytes: their stored sizes")
    events = UsageOutput(help_text="the kept events; bytes: payloads and refs as JSON")
    logs = UsageOutput(help_text="log rows; bytes: their data as JSON")
    kv = UsageOutput(help_text="KV values; bytes: the serialised values")
    total_bytes = serializers.IntegerField(help_text="the sum of the kinds' bytes")
    events_pruned_through = serializers.IntegerField(
        help_text="the highest event sequence the retention policy deleted (0: none)"
    )


def _usage(part: Usage) -> dict[str, int]:
    return {"count": part.count, "bytes": part.bytes}


def storage_json(*, thread_id: object, report: ThreadStorage) -> dict[str, Any]:
    return {
        "thread_id": str(thread_id),
        "messages": _usage(report.messages),
        "files": _usage(report.files),
        "events": _usage(report.events),
        "logs": _usage(report.logs),
        "kv": _usage(report.kv),
        "total_bytes": report.total_bytes,
        "events_pruned_through": report.events_pruned_through,
    }


class ThreadStorageView(ThreadScopedView):
    @extend_schema(
        summary="Report what a thread's messages, files, events, logs and KV take",
        description="Counts and bytes of the thread's own rows, summed by the database. The"
        " route takes no query parameters: any is a 400 naming it.",
        responses=ThreadStorageOutput,
        operation_id="thread_storage",
    )
    def get(self, request: Request, thread_id: str) -> Response:
        for name in request.query_params:
            raise ValidationFailed(
                f"unknown query parameter {name[:100]!r} (this route takes none)", field=name
            )
        thread = self.thread()
        return Response(storage_json(thread_id=thread.pk, report=thread_storage(thread=thread)))
