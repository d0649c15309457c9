"""Reads of a thread's file system: stat, open, read (whole or in chunks), readdir,
stats, grep, find and thumbnails.

* :func:`file_grep` is a plain, case-sensitive substring search, line by line, over files whose
  MIME type is text (:func:`is_text_mime_type`); files over :data:`MAX_GREP_FILE_BYTES` are
  skipped and at most ``limit`` matching lines are returned.
* :func:`file_find` globs: ``*`` any run within a segment, ``**`` any depth, ``?`` one
  character within a segment; a pattern without a leading ``/`` matches anywhere.
"""

from __future__ import annotations

import io
import math
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Literal

from django.core.files.storage import default_storage
from django.db.models import Sum
from PIL import Image, UnidentifiedImageError

from common.errors import Conflict, LimitExceeded, NotFound, ValidationFailed
from threads.models import Thread, ThreadFile
from threads.services.files.storage import _root, _rows
from threads.services.files.validation import (
    _COPY_CHUNK,
    DEFAULT_CHUNK_SIZE,
    MAX_FIND_RESULTS,
    MAX_GREP_FILE_BYTES,
    MAX_GREP_LIMIT,
    MAX_GREP_LINE_CHARS,
    MAX_PATTERN_CHARS,
    MAX_THUMBNAIL_SIDE,
    _under,
    is_image_mime_type,
    is_text_mime_type,
    normalize_path,
)

# Types -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileChunk:
    """One piece of :func:`file_read_stream` (spec §8.8 FileChunk)."""

    data: bytes
    index: int  # 0-based
    total_chunks: int
    is_last: bool


@dataclass(frozen=True)
class FileStats:
    file_count: int
    directory_count: int
    total_size: int  # bytes of every file


@dataclass(frozen=True)
class GrepMatch:
    line: int  # 1-based
    content: str  # the line without its line break, cut to MAX_GREP_LINE_CHARS


@dataclass(frozen=True)
class GrepResult:
    path: str
    matches: list[GrepMatch]


FindType = Literal["file", "directory", "all"]


# Public API: reads -----------------------------------------------------------------------


def file_stat(*, thread: Thread, path: str) -> ThreadFile | None:
    """The row at ``path`` (the root is a synthetic directory), or None."""
    path = normalize_path(path)
    if path == "/":
        return _root(thread)
    return _rows(thread).filter(path=path).first()


def _file_row(thread: Thread, path: str) -> ThreadFile | None:
    row = file_stat(thread=thread, path=path)
    return None if row is None or row.is_directory else row


def file_open(*, thread: Thread, path: str) -> tuple[ThreadFile, IO[bytes]] | None:
    """The file row and an open binary handle on its bytes (the caller closes it), or None
    when there is no file at ``path``."""
    row = _file_row(thread, path)
    if row is None:
        return None
    return row, default_storage.open(row.storage_key, "rb")


def file_read(*, thread: Thread, path: str) -> bytes | None:
    """The whole content of the file at ``path``; None when absent or a directory."""
    opened = file_open(thread=thread, path=path)
    if opened is None:
        return None
    with opened[1] as handle:
        return bytes(handle.read())


def file_read_stream(
    *,
    thread: Thread,
    path: str,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    abort: threading.Event | None = None,
) -> Iterator[FileChunk] | None:
    """The file's bytes as chunks in order (spec §8.8), or None when there is no file.

    A file of at most ``chunk_size`` bytes (an empty one included) is one chunk. Once
    ``abort`` is set no further chunk is yielded. The storage handle opens on the first
    ``next()`` and closes when the iterator ends or is closed.
    """
    if type(chunk_size) is not int or chunk_size <= 0:
        raise ValidationFailed("chunk_size must be a positive integer", field="chunk_size")
    row = _file_row(thread, path)
    if row is None:
        return None
    return _chunks(row, chunk_size, abort)


def _chunks(row: ThreadFile, chunk_size: int, abort: threading.Event | None) -> Iterator[FileChunk]:
    total = max(1, math.ceil(row.size / chunk_size))
    if abort is not None and abort.is_set():
        return
    with default_storage.open(row.storage_key, "rb") as handle:
        for index in range(total):
            if abort is not None and abort.is_set():
                return
            data = _read_exactly(handle, chunk_size)
            yield FileChunk(data=data, index=index, total_chunks=total, is_last=index == total - 1)


def _read_exactly(handle: IO[bytes], size: int) -> bytes:
    parts: list[bytes] = []
    wanted = size
    while wanted > 0:
        part = handle.read(min(wanted, _COPY_CHUNK * 4))
        if not part:
            break
        parts.append(part)
        wanted -= len(part)
    return b"".join(parts)


def file_readdir(*, thread: Thread, path: str) -> list[ThreadFile]:
    """The direct children of directory ``path``, ordered by path.

    Raises NotFound (no such directory) or Conflict (``path`` is a file).
    """
    path = normalize_path(path)
    if path != "/":
        row = _rows(thread).filter(path=path).first()
        if row is None:
            raise NotFound(f"no directory {path}")
        if not row.is_directory:
            raise Conflict(f"{path} is a file, not a directory", field="path")
    return list(_rows(thread).filter(parent_path=path).order_by("path"))


def file_stats(*, thread: Thread) -> FileStats:
    """How many files and directories the thread has and the total bytes of its files."""
    rows = _rows(thread)
    files = rows.filter(is_directory=False).aggregate(total=Sum("size"))
    return FileStats(
        file_count=rows.filter(is_directory=False).count(),
        directory_count=rows.filter(is_directory=True).count(),
        total_size=int(files["total"] or 0),
    )


def _pattern(pattern: object, field: str = "pattern") -> str:
    if not isinstance(pattern, str) or not pattern:
        raise ValidationFailed(f"{field} must be a non-empty string", field=field)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValidationFailed(
            f"{field} is longer than {MAX_PATTERN_CHARS} characters", field=field
        )
    if "\x00" in pattern:
        raise ValidationFailed(f"{field} may not contain NUL", field=field)
    return pattern


def file_grep(
    *, thread: Thread, pattern: str, path: str = "/", limit: int = 1000
) -> list[GrepResult]:
    """Lines of text files at or under ``path`` that contain ``pattern``.

    Plain substring, case-sensitive; bytes are decoded as UTF-8 (invalid bytes replaced).
    Files are visited in path order; files over MAX_GREP_FILE_BYTES are skipped; the search
    stops after ``limit`` matching lines (at most MAX_GREP_LIMIT).
    """
    pattern = _pattern(pattern)
    path = normalize_path(path)
    if type(limit) is not int or not 1 <= limit <= MAX_GREP_LIMIT:
        raise ValidationFailed(f"limit must be between 1 and {MAX_GREP_LIMIT}", field="limit")
    candidates = (
        _rows(thread)
        .filter(_under(path), is_directory=False, size__lte=MAX_GREP_FILE_BYTES)
        .exclude(size=0)
        .order_by("path")
        .values_list("path", "mime_type", "storage_key")
    )
    results: list[GrepResult] = []
    remaining = limit
    for file_path, mime_type, key in candidates.iterator(chunk_size=500):
        if not is_text_mime_type(mime_type):
            continue
        matches = _grep_file(key, pattern, remaining)
        if matches:
            results.append(GrepResult(path=file_path, matches=matches))
            remaining -= len(matches)
            if remaining <= 0:
                break
    return results


def _grep_file(key: str, pattern: str, limit: int) -> list[GrepMatch]:
    matches: list[GrepMatch] = []
    try:
        handle = default_storage.open(key, "rb")
    except FileNotFoundError:
        return matches
    with handle, io.TextIOWrapper(handle, encoding="utf-8", errors="replace", newline=None) as text:
        for number, line in enumerate(text, start=1):
            if pattern in line:
                content = line.rstrip("\n")[:MAX_GREP_LINE_CHARS]
                matches.append(GrepMatch(line=number, content=content))
                if len(matches) >= limit:
                    break
    return matches


def glob_regex(pattern: str) -> re.Pattern[str]:
    """The regular expression of a find glob (see the module docstring)."""
    anchored = pattern.startswith("/")
    body = pattern.lstrip("/") if anchored else pattern
    out = ["/"] if anchored else ["(?:/.*)?/"]
    index = 0
    while index < len(body):
        if body.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif body.startswith("**", index):
            out.append(".*")
            index += 2
        elif body[index] == "*":
            out.append("[^/]*")
            index += 1
        elif body[index] == "?":
            out.append("[^/]")
            index += 1
        else:
            out.append(re.escape(body[index]))
            index += 1
    return re.compile("".join(out).rstrip("/") or "/")


def file_find(*, thread: Thread, pattern: str, type: FindType = "all") -> list[str]:
    """Paths (sorted) whose full path matches the glob ``pattern``; ``type`` keeps files,
    directories or both. Raises LimitExceeded past MAX_FIND_RESULTS matches."""
    regex = glob_regex(_pattern(pattern))
    if type not in ("file", "directory", "all"):
        raise ValidationFailed("type must be file, directory or all", field="type")
    rows = _rows(thread)
    if type != "all":
        rows = rows.filter(is_directory=type == "directory")
    found: list[str] = []
    for candidate in rows.order_by("path").values_list("path", flat=True).iterator(2000):
        if regex.fullmatch(candidate):
            found.append(candidate)
            if len(found) > MAX_FIND_RESULTS:
                raise LimitExceeded(
                    f"more than the cap MAX_FIND_RESULTS ({MAX_FIND_RESULTS}) paths match",
                    field="pattern",
                )
    return found


def file_thumbnail(*, thread: Thread, path: str, max_side: int = 256) -> bytes | None:
    """A thumbnail of the image at ``path`` no larger than ``max_side`` on either side: JPEG
    for JPEG sources, PNG otherwise. None when there is no such file or it is not an image
    Pillow can read (decompression bombs included)."""
    if type(max_side) is not int or not 1 <= max_side <= MAX_THUMBNAIL_SIDE:
        raise ValidationFailed(f"max_side must be 1-{MAX_THUMBNAIL_SIDE}", field="max_side")
    row = _file_row(thread, path)
    if row is None or not is_image_mime_type(row.mime_type):
        return None
    try:
        with default_storage.open(row.storage_key, "rb") as handle, Image.open(handle) as image:
            source_format = image.format
            image.draft("RGB", (max_side, max_side))  # JPEG: decode at a reduced scale
            image.thumbnail((max_side, max_side))
            out = io.BytesIO()
            if source_format == "JPEG":
                image.convert("RGB").save(out, format="JPEG", quality=85)
            elif image.mode in ("RGB", "RGBA", "L", "LA", "P"):
                image.save(out, format="PNG")
            else:
                image.convert("RGBA").save(out, format="PNG")
    except (OSError, ValueError, UnidentifiedImageError, Image.DecompressionBombError):
        return None
    return out.getvalue()


def thumbnail_mime_type(data: bytes) -> str:
    """The MIME type of bytes made by :func:`file_thumbnail`."""
    return "image/png" if data.startswith(b"\x89PNG") else "image/jpeg"
