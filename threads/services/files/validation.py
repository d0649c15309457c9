"""Caps, path normalisation and input validation of a thread's file system.

The caps (``MAX_*``) and defaults every part of :mod:`threads.services.files` shares;
:func:`normalize_path` and the path helpers every row query uses; the checks of a
write's MIME type, metadata and image dimensions.
"""

from __future__ import annotations

import json
import mimetypes
import re
from collections.abc import Mapping
from typing import Any

from django.db.models import Q

from common.errors import LimitExceeded, ValidationFailed

MAX_FILE_BYTES = 512 * 1024 * 1024  # 512 MiB per file
MAX_PATH_BYTES = 1024  # UTF-8 bytes of a normalised path (ThreadFile.path's width)
MAX_SEGMENT_BYTES = 255  # UTF-8 bytes of one path segment (ThreadFile.name's width)
MAX_METADATA_BYTES = 64 * 1024  # compact JSON of a file's metadata
MAX_MIME_TYPE_CHARS = 255
MAX_GREP_FILE_BYTES = 8 * 1024 * 1024  # larger text files are skipped by grep
MAX_GREP_LIMIT = 10_000  # matching lines per grep
MAX_GREP_LINE_CHARS = 1_000  # a match's content is cut to this many characters
MAX_PATTERN_CHARS = 1024
MAX_FIND_RESULTS = 10_000
DEFAULT_CHUNK_SIZE = 1_835_008  # 1.75 MiB, the spec's chunk threshold
MAX_THUMBNAIL_SIDE = 1024
DEFAULT_MIME_TYPE = "application/octet-stream"

_COPY_CHUNK = 1024 * 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MIME = re.compile(r"^[\w.+-]+/[\w.+-]+(\s*;.*)?$")
_TEXT_APPLICATION_TYPES = frozenset(
    {
        "application/json", "application/ld+json", "application/x-ndjson", "application/jsonl",
        "application/xml", "application/yaml", "application/x-yaml", "application/toml",
        "application/javascript", "application/x-javascript", "application/ecmascript",
        "application/typescript", "application/x-typescript", "application/x-sh",
        "application/x-shellscript", "application/x-python", "application/x-ruby",
        "application/x-perl", "application/x-php", "application/sql", "application/graphql",
        "application/csv", "application/x-tex", "application/rtf", "image/svg+xml",
    }
)  # fmt: skip


# Paths -----------------------------------------------------------------------------------


def normalize_path(raw: object) -> str:
    """``raw`` as a normalised thread path, or ValidationFailed (``field="path"``)."""
    if not isinstance(raw, str):
        raise ValidationFailed("path must be a string", field="path")
    if len(raw) > 4 * MAX_PATH_BYTES:
        raise ValidationFailed(f"path is longer than {MAX_PATH_BYTES} bytes", field="path")
    if _CONTROL.search(raw):
        raise ValidationFailed("path may not contain control characters", field="path")
    if "\\" in raw:
        raise ValidationFailed("path may not contain backslashes", field="path")
    segments = [segment for segment in raw.split("/") if segment]
    for segment in segments:
        if segment in (".", ".."):
            raise ValidationFailed("path may not contain '.' or '..' segments", field="path")
        if len(segment.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
            raise ValidationFailed(
                f"a path segment is longer than {MAX_SEGMENT_BYTES} bytes", field="path"
            )
    path = "/" + "/".join(segments)
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise ValidationFailed("path is not valid Unicode", field="path") from error
    if size > MAX_PATH_BYTES:
        raise ValidationFailed(f"path is longer than {MAX_PATH_BYTES} bytes", field="path")
    return path


def _split(path: str) -> tuple[str, str]:
    """``(parent_path, name)`` of a normalised non-root path."""
    parent, _, name = path.rpartition("/")
    return parent or "/", name


def _ancestors(path: str) -> list[str]:
    """The directories above ``path``, outermost first, without the root."""
    segments = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(segments[: index + 1]) for index in range(len(segments))]


def _under(path: str) -> Q:
    """Rows at or below directory ``path``."""
    return Q() if path == "/" else Q(path=path) | Q(path__startswith=path + "/")


# Inputs ----------------------------------------------------------------------------------


def is_text_mime_type(mime_type: str) -> bool:
    """Whether files of ``mime_type`` hold searchable text (DIGEST §14)."""
    base = mime_type.split(";", 1)[0].strip().lower()
    return (
        base.startswith("text/")
        or base in _TEXT_APPLICATION_TYPES
        or base.endswith(("+json", "+xml", "+yaml"))
    )


def is_image_mime_type(mime_type: str) -> bool:
    base = mime_type.split(";", 1)[0].strip().lower()
    return base.startswith("image/") and base != "image/svg+xml"


# The standard library's table alone (not the machine's /etc/mime.types): the same answer
# everywhere; plus the text formats agents often write that Python 3.11's table lacks (or,
# for `.ts`, reads as an MPEG stream).
_TYPES_BY_NAME = mimetypes.MimeTypes(filenames=())
for _extension, _type in {
    ".md": "text/markdown", ".markdown": "text/markdown", ".yaml": "application/yaml",
    ".yml": "application/yaml", ".jsonl": "application/jsonl", ".ts": "text/typescript",
    ".tsx": "text/typescript",
}.items():  # fmt: skip
    _TYPES_BY_NAME.add_type(_type, _extension)


def _mime_type(mime_type: object, path: str) -> str:
    """``mime_type`` checked; when none was given, the type its name says (``.png``:
    ``image/png``), else :data:`DEFAULT_MIME_TYPE`."""
    if mime_type is None or mime_type == "":
        return _TYPES_BY_NAME.guess_type(path, strict=True)[0] or DEFAULT_MIME_TYPE
    if (
        not isinstance(mime_type, str)
        or len(mime_type) > MAX_MIME_TYPE_CHARS
        or not _MIME.match(mime_type)
        or _CONTROL.search(mime_type)
    ):
        raise ValidationFailed("mime_type must look like type/subtype", field="mime_type")
    return mime_type


def _metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise ValidationFailed("metadata must be an object", field="metadata")
    try:
        size = len(json.dumps(dict(metadata), separators=(",", ":"), allow_nan=False).encode())
    except (TypeError, ValueError) as error:
        raise ValidationFailed("metadata must be JSON", field="metadata") from error
    if size > MAX_METADATA_BYTES:
        raise LimitExceeded(
            f"metadata is {size} bytes; the cap MAX_METADATA_BYTES is {MAX_METADATA_BYTES}",
            field="metadata",
        )
    return dict(metadata)


def _dimension(value: object, field: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= 2**31 - 1:
        raise ValidationFailed(f"{field} must be a non-negative integer", field=field)
    return value
