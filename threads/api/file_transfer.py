"""The bytes of the file routes (:mod:`threads.api.files`): downloads streamed in chunks
that honour a single ``Range`` (:func:`file_download_response`, also the console's
download), and raw upload bodies read in chunks (:func:`raw_body`).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from typing import IO

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.utils.http import content_disposition_header
from rest_framework import status

from common.api import error_body
from common.errors import ValidationFailed
from threads.models import ThreadFile

DOWNLOAD_CHUNK = 256 * 1024
UPLOAD_CHUNK = 1024 * 1024
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def content_length(request: HttpRequest) -> int | None:
    raw = request.META.get("CONTENT_LENGTH") or ""
    try:
        return int(raw) if raw else None
    except ValueError as error:
        raise ValidationFailed("Content-Length is not a number") from error


# Downloads -------------------------------------------------------------------------------


def parse_range(header: str | None, size: int) -> tuple[int, int] | bool | None:
    """``(first, last)`` (inclusive) for a satisfiable single range, ``None`` when there is
    no usable Range header (serve the whole file), ``False`` when unsatisfiable."""
    if not header:
        return None
    match = _RANGE.match(header.strip())
    if match is None:
        return None  # malformed or several ranges: ignored (RFC 9110 §14.2)
    first_raw, last_raw = match.groups()
    if not first_raw and not last_raw:
        return None
    if not first_raw:  # bytes=-n: the last n bytes
        suffix = int(last_raw)
        if suffix == 0 or size == 0:
            return False
        return max(0, size - suffix), size - 1
    first = int(first_raw)
    last = int(last_raw) if last_raw else size - 1
    if last_raw and last < first:
        return None
    if first >= size:
        return False
    return first, min(last, size - 1)


def _sync_chunks(handle: IO[bytes], length: int) -> Iterator[bytes]:
    remaining = length
    try:
        while remaining > 0:
            data = handle.read(min(DOWNLOAD_CHUNK, remaining))
            if not data:
                return
            remaining -= len(data)
            yield data
    finally:
        handle.close()


async def _async_chunks(handle: IO[bytes], length: int) -> AsyncIterator[bytes]:
    """Under ASGI Django would gather a sync iterator into one list: read in a thread."""
    read = sync_to_async(handle.read, thread_sensitive=False)
    remaining = length
    try:
        while remaining > 0:
            data = await read(min(DOWNLOAD_CHUNK, remaining))
            if not data:
                return
            remaining -= len(data)
            yield data
    finally:
        handle.close()


def file_download_response(
    request: HttpRequest, row: ThreadFile, handle: IO[bytes]
) -> HttpResponseBase:
    """The file ``row`` (open as ``handle``, which the response closes) streamed as an
    attachment, honouring a single ``Range``; also the console's download."""
    size = row.size
    wanted = parse_range(request.META.get("HTTP_RANGE"), size)
    if wanted is False:
        handle.close()
        return JsonResponse(
            error_body("range_not_satisfiable", f"the file is {size} bytes"),
            status=status.HTTP_416_REQUESTED_RANGE_NOT_SATISFIABLE,
            headers={"Content-Range": f"bytes */{size}"},
        )
    first, last = wanted if isinstance(wanted, tuple) else (0, size - 1)
    length = max(0, last - first + 1)
    if first:
        handle.seek(first)
    content = (
        _async_chunks(handle, length)
        if isinstance(request, ASGIRequest)
        else _sync_chunks(handle, length)
    )
    response = StreamingHttpResponse(
        content,
        status=status.HTTP_206_PARTIAL_CONTENT if isinstance(wanted, tuple) else 200,
        content_type=row.mime_type or "application/octet-stream",
    )
    response._resource_closers.append(handle.close)  # type: ignore[attr-defined]
    response["Content-Length"] = str(length)
    response["Accept-Ranges"] = "bytes"
    response["Content-Disposition"] = content_disposition_header(True, row.name) or "attachment"
    response["X-Content-Type-Options"] = "nosniff"
    if isinstance(wanted, tuple):
        response["Content-Range"] = f"bytes {first}-{last}/{size}"
    return response


# Uploads ---------------------------------------------------------------------------------


def raw_body(request: HttpRequest) -> Iterator[bytes]:
    while True:
        chunk = request.read(UPLOAD_CHUNK)
        if not chunk:
            return
        yield chunk
