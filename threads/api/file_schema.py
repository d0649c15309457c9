"""The JSON shapes of the file routes (:mod:`threads.api.files`) and their OpenAPI
declarations: the FileRecord, directory page, search result and stats serializers, the
builders the views answer with, and the parameters, responses and descriptions of reading
and writing ``fs/<path>``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, PolymorphicProxySerializer
from rest_framework import serializers

from common.pagination import PAGE_PARAMETERS
from common.schema import PageSerializer, error_response
from threads.models import ThreadFile
from threads.services.files import MAX_THUMBNAIL_SIDE, FileStats, GrepMatch, GrepResult

# Outputs ---------------------------------------------------------------------------------


class FileRecordSerializer(serializers.Serializer[ThreadFile]):
    """A file or directory of a thread's file system: where it is, what it is, and its
    size and metadata (never its bytes). Times are microseconds since the Unix epoch."""

    path = serializers.CharField(help_text="leading `/`, no trailing `/`; the root is `/`")
    name = serializers.CharField(help_text="the last segment of `path` (blank for the root)")
    mime_type = serializers.CharField(help_text="the file's media type (blank for directories)")
    storage = serializers.CharField(help_text="where the bytes are kept (`local`)")
    size = serializers.IntegerField(help_text="bytes (0 for directories)")
    is_directory = serializers.BooleanField()
    metadata = serializers.DictField(help_text="the JSON object given at upload")
    width = serializers.IntegerField(allow_null=True, help_text="pixels, for images")
    height = serializers.IntegerField(allow_null=True, help_text="pixels, for images")
    created_at = serializers.IntegerField()
    updated_at = serializers.IntegerField(help_text="the last upload that replaced the bytes")


class DirectorySerializer(PageSerializer):
    """One page of a directory's entries, by path, in the list shape, with the
    directory's `path`."""

    results = FileRecordSerializer(many=True)
    path = serializers.CharField(help_text="the directory listed")


class GrepMatchSerializer(serializers.Serializer[GrepMatch]):
    """One matching line of a file."""

    line = serializers.IntegerField(help_text="1-based")
    content = serializers.CharField(
        help_text="the line, without its line break, cut to 1,000 characters"
    )


class FileSearchResultSerializer(serializers.Serializer[Any]):
    """A path that `fs-search` found: with `grep`, a file and its matching lines; with
    `find`, a file or directory whose path matches the glob (`path` alone)."""

    path = serializers.CharField()
    matches = GrepMatchSerializer(
        many=True, required=False, help_text="with `grep`: the matching lines, in order"
    )


class FileStatsSerializer(serializers.Serializer[FileStats]):
    """The totals of a thread's file system."""

    file_count = serializers.IntegerField()
    directory_count = serializers.IntegerField(help_text="the root not counted")
    total_size = serializers.IntegerField(help_text="bytes of every file")


def file_json(row: ThreadFile) -> dict[str, Any]:
    """The FileRecord of ``row`` (snake_case)."""
    return dict(FileRecordSerializer(row).data)


def grep_json(result: GrepResult) -> dict[str, Any]:
    return dict(FileSearchResultSerializer(result).data)


def found_json(path: str) -> dict[str, Any]:
    return {"path": path}


# Reading and writing fs/<path> -----------------------------------------------------------


READ_PARAMETERS = [
    *PAGE_PARAMETERS,
    OpenApiParameter("stat", bool, description="answer the `FileRecord` instead of the bytes"),
    OpenApiParameter("thumbnail", bool, description="a PNG/JPEG thumbnail of an image"),
    OpenApiParameter(
        "size", int, description=f"the thumbnail's longest side, 1 to {MAX_THUMBNAIL_SIDE}"
    ),
    OpenApiParameter(
        "Range", str, OpenApiParameter.HEADER, description="one range: `bytes=a-b`, `a-`, `-n`"
    ),
]
_FILE_OR_DIRECTORY = PolymorphicProxySerializer(
    component_name="FileOrDirectory",
    serializers=[DirectorySerializer, FileRecordSerializer],
    resource_type_field_name=None,
)
READ_RESPONSES = {
    (200, "application/json"): OpenApiResponse(
        _FILE_OR_DIRECTORY,
        description="a directory: a page of its entries; with `stat`, the `FileRecord`",
    ),
    (200, "*/*"): OpenApiResponse(
        OpenApiTypes.BINARY, description="a file's bytes, in its media type, or a thumbnail"
    ),
    (206, "*/*"): OpenApiResponse(OpenApiTypes.BINARY, description="the range asked for"),
    416: error_response(416, "The range lies outside the file"),
}
WRITE_RESPONSES = {
    200: OpenApiResponse(FileRecordSerializer, description="an existing file was replaced"),
    201: OpenApiResponse(FileRecordSerializer, description="the file or directory was created"),
    409: error_response(409, "The path is a directory, or a parent of it is a file"),
}
READ_DESCRIPTION = (
    "A file answers its bytes in its media type, streamed, with `Range` support (206, or 416"
    " when the range lies outside the file); `stat` answers its `FileRecord` instead, and"
    " `thumbnail` a PNG or JPEG thumbnail of an image (404 for anything else). A directory"
    " answers a page of its entries by path, in the list shape, with its `path`."
)
UPLOAD_DESCRIPTION = (
    "A raw body whose `Content-Type` is the file's media type (without one, the type the"
    " name says, else `application/octet-stream`), or `multipart/form-data` with the field"
    " `file` and optional `mime_type` and `metadata` (a JSON object). Missing parent"
    " directories are created. 201 for a new file, 200 when it replaced one."
)
