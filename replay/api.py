"""``GET /api/v1/threads/{id}/export`` and ``GET /api/v1/sessions/{session_id}/export``: a
thread's or a session's portable export (agent-runtime-events ``export_replay`` /
``export_evidence``), streamed as JSON lines (:mod:`replay.export`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from common.drf import StreamRenderer
from common.errors import ValidationFailed
from common.schema import error_response
from replay.export import (
    FORMAT,
    ExportScope,
    export_chunks,
    export_scope_session,
    export_scope_thread,
)
from threads.api.base import TenantObjectView

NDJSON = "application/x-ndjson"

EXPORT_DESCRIPTION = (
    f"The export as JSON lines (`{NDJSON}`, format `{FORMAT}`), streamed: every line is one "
    "record with a `kind`. `header` first (`format`, the `thread_id` or `session_id`, "
    "`tenant_id`, `exported_at` in µs, `schema_version`); then a `thread` record per thread "
    "(its stored fields, `status` as stored, and `events_pruned_through`: the highest "
    "sequence the retention policy deleted, 0 when none); a `definition` record per "
    "definition in force for those threads (`type` `agent`, `prompt`, `model`, `code_tool` "
    "or `tool`, `name`, `document`, `updated_at`, `missing`: named but defined nowhere); "
    "then for each thread its `event` records (the stored events in sequence order, each as "
    "the events route shows it), its `message` records, its `log` records and its `file` "
    "records (`path`, `size`, `sha256`, `mime_type`: a manifest, never the content); and an "
    "`end` record last with the `counts` of each kind. A stream without its `end` record was "
    "cut short. The route takes no query parameters: any is a 400 naming it."
)
NDJSON_LINES = OpenApiResponse(
    {"type": "string"}, description="JSON lines, one record per line, `header` to `end`"
)


class NdjsonRenderer(StreamRenderer):
    """Lets ``Accept: application/x-ndjson`` through content negotiation (the export itself
    is a streamed response, never rendered; errors answer JSON)."""

    media_type = NDJSON
    format = "ndjson"


def _next_chunk(chunks: Iterator[bytes]) -> bytes | None:
    return next(chunks, None)


async def _async_chunks(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Under ASGI Django would gather a sync iterator into one list: each chunk is read on
    the thread that serves the ORM instead, one at a time."""
    step = sync_to_async(_next_chunk, thread_sensitive=True)
    while True:
        chunk = await step(chunks)
        if chunk is None:
            return
        yield chunk


class ExportView(TenantObjectView):
    """Resolves the URL's scope within the caller's tenant (any role reads)."""

    renderer_classes = [JSONRenderer, NdjsonRenderer]

    def resolve(self) -> object:
        return self.scope()

    def handle_exception(self, exc: Exception) -> Response:
        """An error answers JSON, whatever the request accepted."""
        response = super().handle_exception(exc)
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type
        return response

    def scope(self) -> ExportScope:
        raise NotImplementedError

    def stream(self, request: Request, filename: str) -> StreamingHttpResponse:
        for name in request.query_params:
            raise ValidationFailed(
                f"unknown query parameter {name[:100]!r} (this route takes none)", field=name
            )
        chunks = export_chunks(self.scope())
        content = _async_chunks(chunks) if isinstance(request._request, ASGIRequest) else chunks
        response = StreamingHttpResponse(content, content_type=NDJSON)
        response["Content-Disposition"] = f'attachment; filename="{filename}.ndjson"'
        response["Cache-Control"] = "no-store"
        return response


class ThreadExportView(ExportView):
    def scope(self) -> ExportScope:
        cached: ExportScope | None = getattr(self, "_scope", None)
        if cached is None:
            cached = export_scope_thread(
                tenant=self.principal.tenant, thread_id=self.kwargs["thread_id"]
            )
            self._scope = cached
        return cached

    @extend_schema(
        summary="Export a thread: its events, messages, logs, file manifest and definitions",
        description=EXPORT_DESCRIPTION,
        responses={
            (200, NDJSON): NDJSON_LINES,
            404: error_response(404, "No such thread for this tenant"),
        },
        operation_id="thread_export",
        tags=["export"],
    )
    def get(self, request: Request, thread_id: str) -> StreamingHttpResponse:
        return self.stream(request, f"thread-{thread_id}")


class SessionExportView(ExportView):
    def scope(self) -> ExportScope:
        cached: ExportScope | None = getattr(self, "_scope", None)
        if cached is None:
            cached = export_scope_session(
                tenant=self.principal.tenant, session_id=self.kwargs["session_id"]
            )
            self._scope = cached
        return cached

    @extend_schema(
        summary="Export a session: every thread of its tree, as the thread export does",
        description=EXPORT_DESCRIPTION + " A session export holds every thread of the "
        "session (root first, then by creation), each thread's records in turn. A child "
        "thread's id is a 404 naming its session (`details.session_id`).",
        responses={
            (200, NDJSON): NDJSON_LINES,
            404: error_response(
                404, "No such session for this tenant, or the id is a child thread's"
            ),
        },
        operation_id="session_export",
        tags=["export"],
    )
    def get(self, request: Request, session_id: str) -> StreamingHttpResponse:
        return self.stream(request, f"session-{session_id}")
