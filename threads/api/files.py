"""A thread's file system over REST (spec Threads §8), under ``/api/v1/threads/{id}/``.

Routes (roles as everywhere: read for ``GET``, member for the rest):

* ``GET fs``, ``GET fs/<path>``: a directory → a page of its entries (FileRecords, by
  path) in the list shape with the directory's ``path``; a file → its bytes. ``?stat=1``
  → the FileRecord; ``?thumbnail=1&size=256`` → a PNG/JPEG thumbnail (404 when not an
  image). The root ``fs`` is read only (405 for the rest).
* ``PUT fs/<path>``, ``POST fs/<path>``: upload (create or replace) → 201 FileRecord when
  the file is new, 200 when it replaced one.
* ``POST fs/<path>`` with JSON ``{"type": "directory"}``: mkdir (idempotent) → 201.
* ``DELETE fs/<path>``: a file is unlinked, a directory removed (409 unless empty) → 204.
* ``GET fs-search?grep=<text>&path=/&max_matches=100`` → a page of ``{path, matches:
  [{line, content}]}``, one per file, by path; the search stops after ``max_matches``
  matching lines in all.
* ``GET fs-search?find=<glob>&type=all`` → a page of ``{path}`` (``type``: file,
  directory, all), by path.
* ``GET fs-stats`` → ``{file_count, directory_count, total_size}``.

Directory listings and search results are built in memory and page by place
(:func:`common.pagination.paginate`): ``?limit=`` and ``?cursor=`` as for every list.

Uploads are either ``multipart/form-data`` (field ``file``; optional fields ``mime_type`` and
``metadata``, a JSON object) or a raw body whose ``Content-Type`` is the file's MIME type;
without one, the type its name says (``.png``: ``image/png``), else
``application/octet-stream``.
Both stream to storage: a raw body is read in chunks, multipart files past
``FILE_UPLOAD_MAX_MEMORY_SIZE`` spill to temporary files. A ``POST`` with
``Content-Type: application/json`` is a command (only ``{"type": "directory"}``); upload JSON
files with ``PUT``.

Downloads stream (never the whole file in memory; :mod:`threads.api.file_transfer`),
carry ``Content-Length``, ``Accept-Ranges: bytes`` and ``Content-Disposition: attachment``,
and honour a single ``Range`` (``bytes=a-b``, ``bytes=a-``, ``bytes=-n`` → 206 with
``Content-Range``; unsatisfiable → 416). A malformed or multi-range header is ignored (200,
whole file).

FileRecord JSON is snake_case (:class:`threads.api.file_schema.FileRecordSerializer`):
``path, name, mime_type, storage, size, is_directory, metadata, width, height, created_at,
updated_at`` (µs). A bad path is a 400 naming ``path``; a file over the cap is a 413 naming
``MAX_FILE_BYTES``.
"""

from __future__ import annotations

from typing import Any, cast

from django.http import HttpResponse
from django.http.response import HttpResponseBase
from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import LimitExceeded, NotFound, ValidationFailed
from common.pagination import PAGE_PARAMETERS, paginate
from common.parsing import json_parse
from common.payloads import known_keys_check
from common.schema import error_response, page_of
from threads.api.base import ThreadScopedView
from threads.api.file_schema import (
    READ_DESCRIPTION,
    READ_PARAMETERS,
    READ_RESPONSES,
    UPLOAD_DESCRIPTION,
    WRITE_RESPONSES,
    DirectorySerializer,
    FileSearchResultSerializer,
    FileStatsSerializer,
    file_json,
    found_json,
    grep_json,
)
from threads.api.file_transfer import content_length, file_download_response, raw_body
from threads.services.files import (
    MAX_FILE_BYTES,
    MAX_GREP_LIMIT,
    MAX_THUMBNAIL_SIDE,
    FindType,
    file_find,
    file_grep,
    file_mkdir,
    file_open,
    file_readdir,
    file_rmdir,
    file_stat,
    file_stats,
    file_thumbnail,
    file_unlink,
    file_write,
    normalize_path,
    thumbnail_mime_type,
)

MAX_COMMAND_BYTES = 64 * 1024  # a JSON command body (mkdir)
DEFAULT_MAX_MATCHES = 100  # matching lines one grep collects


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in ("1", "true", "yes")


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ValidationFailed(f"{name} must be an integer from {low} to {high}", field=name)
    return value


def _metadata_field(raw: object) -> dict[str, Any] | None:
    if raw is None or raw == "":
        return None
    value = json_parse(str(raw), field="metadata")
    if not isinstance(value, dict):
        raise ValidationFailed("metadata must be a JSON object", field="metadata")
    return value


class FileView(ThreadScopedView):
    """``fs/<path>``: read, upload, mkdir and delete (see the module docstring)."""

    parser_classes = [MultiPartParser, JSONParser]

    def _path(self) -> str:
        return normalize_path(self.kwargs.get("file_path") or "/")

    @extend_schema(
        summary="Read a file, or list a directory",
        description=READ_DESCRIPTION,
        parameters=READ_PARAMETERS,
        responses=READ_RESPONSES,
        operation_id="thread_fs_read",
    )
    def get(
        self, request: Request, thread_id: str, file_path: str = "/"
    ) -> Response | HttpResponseBase:
        thread, target = self.thread(), self._path()
        if _flag(request, "stat"):
            row = file_stat(thread=thread, path=target)
            if row is None:
                raise NotFound(f"no file or directory {target}")
            return Response(file_json(row))
        if _flag(request, "thumbnail"):
            side = _int_param(request, "size", 256, 1, MAX_THUMBNAIL_SIDE)
            data = file_thumbnail(thread=thread, path=target, max_side=side)
            if data is None:
                raise NotFound(f"no image at {target}")
            return HttpResponse(data, content_type=thumbnail_mime_type(data))
        opened = file_open(thread=thread, path=target)
        if opened is not None:
            return file_download_response(request._request, *opened)
        entries = file_readdir(thread=thread, path=target)  # NotFound when nothing is there
        page = paginate(request, entries, file_json, view=self)
        page.data["path"] = target
        return page

    @extend_schema(
        summary="Upload a file",
        operation_id="thread_fs_write",
        description=UPLOAD_DESCRIPTION,
        request=OpenApiTypes.BINARY,
        responses=WRITE_RESPONSES,
    )
    def put(self, request: Request, thread_id: str, file_path: str = "/") -> Response:
        return self._upload(request)

    @extend_schema(
        summary="Upload a file, or create a directory",
        description=UPLOAD_DESCRIPTION + ' A JSON body `{"type": "directory"}` creates the'
        " directory and its missing parents instead (201, also when it exists); upload"
        " JSON files with `PUT`.",
        request=OpenApiTypes.BINARY,
        responses=WRITE_RESPONSES,
        operation_id="thread_fs_create",
    )
    def post(self, request: Request, thread_id: str, file_path: str = "/") -> Response:
        if request.content_type.split(";")[0].strip() == "application/json":
            return self._command(request)
        return self._upload(request)

    @extend_schema(
        summary="Delete a file or an empty directory",
        operation_id="thread_fs_delete",
        responses={204: None, 409: error_response(409, "The directory is not empty")},
    )
    def delete(self, request: Request, thread_id: str, file_path: str = "/") -> Response:
        thread, target = self.thread(), self._path()
        row = file_stat(thread=thread, path=target)
        if row is None:
            raise NotFound(f"no file or directory {target}")
        if row.is_directory:
            file_rmdir(thread=thread, path=target)
        else:
            file_unlink(thread=thread, path=target)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _command(self, request: Request) -> Response:
        length = content_length(request._request)
        if length is not None and length > MAX_COMMAND_BYTES:
            raise LimitExceeded(
                f"a JSON command is over the cap MAX_COMMAND_BYTES ({MAX_COMMAND_BYTES} bytes);"
                " upload JSON files with PUT"
            )
        body = request.data
        if isinstance(body, dict):
            known_keys_check(body, ("type",))
        if not isinstance(body, dict) or body.get("type") != "directory":
            raise ValidationFailed(
                'a JSON POST must be {"type": "directory"}; upload JSON files with PUT',
                field="type",
            )
        row = file_mkdir(thread=self.thread(), path=self._path())
        return Response(file_json(row), status=status.HTTP_201_CREATED)

    def _upload(self, request: Request) -> Response:
        target = self._path()
        http_request = request._request
        length = content_length(http_request)
        if length is not None and length > MAX_FILE_BYTES + MAX_COMMAND_BYTES:
            raise LimitExceeded(
                f"the body is {length} bytes; the cap MAX_FILE_BYTES is {MAX_FILE_BYTES}",
                field="data",
            )
        if request.content_type.startswith("multipart/form-data"):
            upload = request.FILES.get("file")
            if upload is None:
                raise ValidationFailed("the multipart field 'file' is required", field="file")
            mime_type = request.data.get("mime_type") or upload.content_type
            metadata = _metadata_field(request.data.get("metadata"))
            try:
                row = file_write(
                    thread=self.thread(), path=target, data=upload, mime_type=mime_type,
                    metadata=metadata,
                )  # fmt: skip
            finally:
                upload.close()
        else:
            if length is not None and length > MAX_FILE_BYTES:
                raise LimitExceeded(
                    f"the body is {length} bytes; the cap MAX_FILE_BYTES is {MAX_FILE_BYTES}",
                    field="data",
                )
            row = file_write(
                thread=self.thread(), path=target, data=raw_body(http_request),
                mime_type=http_request.META.get("CONTENT_TYPE") or None,
            )  # fmt: skip
        created = row.created_at == row.updated_at  # a replaced file keeps its creation time
        return Response(
            file_json(row), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )


_SEARCH_PARAMETERS = [
    *PAGE_PARAMETERS,
    OpenApiParameter("grep", str, description="text to find in text files (plain, case-sensitive)"),
    OpenApiParameter("find", str, description="a glob over paths: `*`, `**`, `?`"),
    OpenApiParameter("path", str, description="with `grep`: where to search (default `/`)"),
    OpenApiParameter(
        "max_matches", int,
        description=f"with `grep`: stop after this many matching lines in all, 1 to "
        f"{MAX_GREP_LIMIT} (default {DEFAULT_MAX_MATCHES})",
    ),
    OpenApiParameter(
        "type", str, enum=["file", "directory", "all"],
        description="with `find`: what to keep (default `all`)",
    ),
]  # fmt: skip


class FileSearchView(ThreadScopedView):
    """``fs-search``: ``grep`` (text search) or ``find`` (glob), exactly one of them."""

    @extend_schema(
        summary="Search a thread's files by content or by path",
        operation_id="thread_fs_search",
        description="Give exactly one of `grep` and `find`. Results come by path: with"
        " `grep`, each file that holds the text with its matching lines (files over 8 MiB"
        " and files that are not text are skipped); with `find`, each path that matches the"
        " glob (a glob without a leading `/` matches at any depth).",
        parameters=_SEARCH_PARAMETERS,
        responses=page_of(FileSearchResultSerializer),
    )
    def get(self, request: Request, thread_id: str) -> Response:
        grep, find = request.query_params.get("grep"), request.query_params.get("find")
        if (grep is None) == (find is None):
            raise ValidationFailed("give exactly one of grep and find", field="grep")
        thread = self.thread()
        if grep is not None:
            most = _int_param(request, "max_matches", DEFAULT_MAX_MATCHES, 1, MAX_GREP_LIMIT)
            where = request.query_params.get("path", "/")
            results = file_grep(thread=thread, pattern=grep, path=where, limit=most)
            return paginate(request, results, grep_json, view=self)
        assert find is not None
        kind = request.query_params.get("type", "all")
        if kind not in ("file", "directory", "all"):
            raise ValidationFailed("type must be file, directory or all", field="type")
        found = file_find(thread=thread, pattern=find, type=cast("FindType", kind))
        return paginate(request, found, found_json, view=self)


class FileStatsView(ThreadScopedView):
    @extend_schema(
        summary="Count a thread's files, directories and bytes",
        operation_id="thread_fs_stats",
        responses=FileStatsSerializer,
    )
    def get(self, request: Request, thread_id: str) -> Response:
        return Response(FileStatsSerializer(file_stats(thread=self.thread())).data)


class FileRootView(FileView):
    """The thread's root directory ``/``: read only (405 for the rest), since it always
    exists and no file can take its place."""

    http_method_names = ["get", "head", "options"]

    @extend_schema(
        summary="List the root directory of a thread's files",
        parameters=PAGE_PARAMETERS,
        responses=DirectorySerializer,
        operation_id="thread_fs_root_read",
    )
    def get(
        self, request: Request, thread_id: str, file_path: str = "/"
    ) -> Response | HttpResponseBase:
        return super().get(request, thread_id, file_path)


@extend_schema(exclude=True)
class FileRootAliasView(FileRootView):
    """``fs/``: an alias of the root, left out of the schema."""


urlpatterns = [
    path("fs", FileRootView.as_view(), name="thread-fs-root"),
    path("fs/", FileRootAliasView.as_view(), name="thread-fs-root-slash"),
    path("fs/<path:file_path>", FileView.as_view(), name="thread-fs"),
    path("fs-search", FileSearchView.as_view(), name="thread-fs-search"),
    path("fs-stats", FileStatsView.as_view(), name="thread-fs-stats"),
]
