"""A thread's file system (spec Threads §8; DIGEST §14).

Contracts:

* Paths are normalised by :func:`normalize_path`: a leading ``/``, no trailing ``/``, no
  repeated ``/``. ``.`` and ``..`` segments, control characters (NUL included), backslashes,
  segments over :data:`MAX_SEGMENT_BYTES` and paths over :data:`MAX_PATH_BYTES` (UTF-8) are
  refused with :class:`ValidationFailed` naming ``path``, so no path escapes the thread root.
  The root ``/`` always exists and has no row.
* Rows (:class:`ThreadFile`) hold the tree; bytes live in Django's default storage
  (filesystem, or S3 through django-storages) under ``<tenant id>/<thread id>/<uuid>``: every
  stored name begins with the tenant id. A write streams its input into storage in chunks
  (never the whole file in memory) and replaces any previous bytes after commit.
* Writing creates missing parent directories; writing over a directory, or under a file, is a
  :class:`Conflict`. ``rmdir`` removes empty directories only.
* :func:`file_grep` is a plain, case-sensitive substring search, line by line, over files whose
  MIME type is text (:func:`is_text_mime_type`); files over :data:`MAX_GREP_FILE_BYTES` are
  skipped and at most ``limit`` matching lines are returned.
* :func:`file_find` globs: ``*`` any run within a segment, ``**`` any depth, ``?`` one
  character within a segment; a pattern without a leading ``/`` matches anywhere.
* Writes run under ``transaction.atomic``; each records its ``file.changed`` event in it.

Caps, each named in its :class:`LimitExceeded` message: :data:`MAX_FILE_BYTES`,
:data:`MAX_METADATA_BYTES`, :data:`MAX_GREP_LIMIT`, :data:`MAX_FIND_RESULTS`.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, Literal, Protocol, cast

from django.core.files.base import File
from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet, Sum
from PIL import Image, UnidentifiedImageError

from common.errors import Conflict, LimitExceeded, NotFound, ValidationFailed
from common.time import now_us
from threads.events import publish
from threads.models import Thread, ThreadFile

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
        "application/json", "application/ld+json", "application/x-ndjson",
        "application/xml", "application/yaml", "application/x-yaml", "application/toml",
        "application/javascript", "application/x-javascript", "application/ecmascript",
        "application/typescript", "application/x-typescript", "application/x-sh",
        "application/x-shellscript", "application/x-python", "application/x-ruby",
        "application/x-perl", "application/x-php", "application/sql", "application/graphql",
        "application/csv", "application/x-tex", "application/rtf", "image/svg+xml",
    }
)  # fmt: skip


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


class _Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


FileData = bytes | bytearray | memoryview | _Readable | Iterable[bytes]


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


def _mime_type(mime_type: object) -> str:
    if mime_type is None or mime_type == "":
        return DEFAULT_MIME_TYPE
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


# Storage ---------------------------------------------------------------------------------


def _storage_name() -> str:
    """The FileRecord ``storage`` of new bytes: ``s3`` for S3-backed storage, else ``local``."""
    return "s3" if "s3" in type(default_storage).__name__.lower() else "local"


def _thread_prefix(tenant_id: object, thread_id: object) -> str:
    return f"{tenant_id}/{thread_id}"


def _limit_error(size: int) -> LimitExceeded:
    return LimitExceeded(
        f"file is larger than the cap MAX_FILE_BYTES ({MAX_FILE_BYTES} bytes; got {size}+)",
        field="data",
    )


class _CappedReader(io.RawIOBase):
    """A non-seekable reader over bytes, a ``read()``-able object or an iterable of bytes
    that counts what passes and raises LimitExceeded past MAX_FILE_BYTES."""

    def __init__(self, data: FileData) -> None:
        super().__init__()
        self.size = 0
        self._pending = b""
        self._reader: _Readable | None = None
        self._chunks: Iterator[bytes] | None = None
        if isinstance(data, bytes | bytearray | memoryview):
            self._reader = io.BytesIO(bytes(data))
        elif hasattr(data, "read"):
            self._reader = data  # type: ignore[assignment]
        else:
            self._chunks = iter(data)

    def readable(self) -> bool:
        return True

    def _next(self, size: int) -> bytes:
        if self._reader is not None:
            return bytes(self._reader.read(size))
        assert self._chunks is not None
        for chunk in self._chunks:
            if chunk:
                return bytes(chunk)
        return b""

    def read(self, size: int = -1) -> bytes:
        wanted = _COPY_CHUNK if size is None or size < 0 else size
        data = self._pending or self._next(wanted)
        data, self._pending = data[:wanted], data[wanted:]
        self.size += len(data)
        if self.size > MAX_FILE_BYTES:
            raise _limit_error(self.size)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _store(thread: Thread, data: FileData) -> tuple[str, int]:
    """Stream ``data`` into storage under a fresh name; ``(storage_key, size)``."""
    key = f"{_thread_prefix(thread.tenant_id, thread.id)}/{uuid.uuid4().hex}"
    reader = _CappedReader(data)
    try:
        saved = default_storage.save(key, File(cast(IO[bytes], reader), name=key))
    except BaseException:
        _delete_quietly(key)
        raise
    return saved, reader.size


def _delete_quietly(key: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        default_storage.delete(key)


def _delete_after_commit(keys: Iterable[str]) -> None:
    doomed = [key for key in keys if key]

    def delete() -> None:
        for key in doomed:
            _delete_quietly(key)

    if doomed:
        transaction.on_commit(delete)


def _image_size(key: str) -> tuple[int | None, int | None]:
    """Width and height from the image header (nothing is decoded), or Nones."""
    try:
        with default_storage.open(key, "rb") as handle, Image.open(handle) as image:
            width, height = image.size
            return width, height
    except (OSError, ValueError, UnidentifiedImageError, Image.DecompressionBombError):
        return None, None


# Rows ------------------------------------------------------------------------------------


def _rows(thread: Thread) -> QuerySet[ThreadFile]:
    return ThreadFile.objects.for_tenant(thread.tenant).filter(thread=thread)


def _root(thread: Thread) -> ThreadFile:
    """The implicit root directory (never saved)."""
    return ThreadFile(
        tenant_id=thread.tenant_id, thread=thread, path="/", parent_path="/", name="",
        is_directory=True, created_at=thread.created_at, updated_at=thread.created_at,
    )  # fmt: skip


def _ensure_directory(thread: Thread, path: str) -> ThreadFile:
    """The directory row at ``path`` (created if missing); Conflict if a file is there."""
    parent_path, name = _split(path)
    row, _ = _rows(thread).get_or_create(
        path=path,
        defaults={"tenant_id": thread.tenant_id, "thread": thread, "parent_path": parent_path,
                  "name": name, "is_directory": True, "storage": _storage_name()},
    )  # fmt: skip
    if not row.is_directory:
        raise Conflict(f"{path} is a file, not a directory", field="path")
    return row


def _ensure_parents(thread: Thread, path: str) -> None:
    for ancestor in _ancestors(path):
        _ensure_directory(thread, ancestor)


# Public API: writes ----------------------------------------------------------------------


def file_write(
    *,
    thread: Thread,
    path: str,
    data: FileData,
    mime_type: str | None,
    metadata: Mapping[str, Any] | None = None,
    width: int | None = None,
    height: int | None = None,
) -> ThreadFile:
    """Write (create or replace) the file at ``path`` and return its row.

    ``data`` is bytes, a binary file-like object or an iterable of bytes; it is streamed to
    storage in chunks before the rows are written (in one ``transaction.atomic``), so no
    database transaction of ours stays open during an upload. Missing parent directories are
    created. For image MIME types without ``width``/``height`` the dimensions are read from
    the image header.

    Raises ValidationFailed (path, mime_type, metadata, width, height), Conflict (a directory
    is at ``path`` or a file is at one of its parents), LimitExceeded (MAX_FILE_BYTES,
    MAX_METADATA_BYTES). Replaced bytes are deleted after commit; when the write fails the
    new bytes are deleted at once.
    """
    path = normalize_path(path)
    if path == "/":
        raise Conflict("/ is a directory", field="path")
    mime_type = _mime_type(mime_type)
    clean_metadata = _metadata(metadata)
    width, height = _dimension(width, "width"), _dimension(height, "height")
    key, size = _store(thread, data)
    try:
        if is_image_mime_type(mime_type) and (width is None or height is None):
            found_width, found_height = _image_size(key)
            width = found_width if width is None else width
            height = found_height if height is None else height
        with transaction.atomic():
            _ensure_parents(thread, path)
            row = _upsert(thread, path, key, size, mime_type, clean_metadata, width, height)
            _announce(thread, row.path, "written")
            return row
    except BaseException:
        _delete_quietly(key)
        raise


def _upsert(
    thread: Thread, path: str, key: str, size: int, mime_type: str,
    metadata: dict[str, Any], width: int | None, height: int | None,
) -> ThreadFile:  # fmt: skip
    parent_path, name = _split(path)
    fields = {
        "mime_type": mime_type, "size": size, "storage": _storage_name(), "storage_key": key,
        "metadata": metadata, "width": width, "height": height, "updated_at": now_us(),
    }  # fmt: skip
    row = _rows(thread).select_for_update().filter(path=path).first()
    if row is None:
        try:
            with transaction.atomic():
                return ThreadFile.objects.create(
                    tenant_id=thread.tenant_id, thread=thread, path=path,
                    parent_path=parent_path, name=name, **fields,
                )  # fmt: skip
        except IntegrityError:  # a concurrent writer created it; replace theirs
            row = _rows(thread).select_for_update().get(path=path)
    if row.is_directory:
        raise Conflict(f"{path} is a directory", field="path")
    _delete_after_commit([row.storage_key])
    for field, value in fields.items():
        setattr(row, field, value)
    row.save(update_fields=list(fields))
    return row


@transaction.atomic
def file_mkdir(*, thread: Thread, path: str) -> ThreadFile:
    """Create the directory ``path`` and its missing parents; an existing directory is
    returned as is. Raises Conflict when a file is at ``path`` or above it."""
    path = normalize_path(path)
    if path == "/":
        return _root(thread)
    _ensure_parents(thread, path)
    row = _ensure_directory(thread, path)
    _announce(thread, row.path, "created")
    return row


@transaction.atomic
def file_rmdir(*, thread: Thread, path: str) -> None:
    """Remove the empty directory ``path``.

    Raises NotFound (no such directory), Conflict (a file, or not empty: the message
    names how many entries it holds), ValidationFailed (the root).
    """
    path = normalize_path(path)
    if path == "/":
        raise ValidationFailed("the root directory cannot be removed", field="path")
    row = _rows(thread).select_for_update().filter(path=path).first()
    if row is None:
        raise NotFound(f"no directory {path}")
    if not row.is_directory:
        raise Conflict(f"{path} is a file, not a directory", field="path")
    count = _rows(thread).filter(parent_path=path).count()
    if count:
        raise Conflict(f"directory {path} is not empty ({count} entries)", field="path")
    row.delete()
    _announce(thread, path, "deleted")


@transaction.atomic
def file_unlink(*, thread: Thread, path: str) -> bool:
    """Delete the file at ``path`` and (after commit) its bytes; False when there is none.
    Raises Conflict when ``path`` is a directory (use :func:`file_rmdir`)."""
    path = normalize_path(path)
    if path == "/":
        raise Conflict("/ is a directory", field="path")
    row = _rows(thread).select_for_update().filter(path=path).first()
    if row is None:
        return False
    if row.is_directory:
        raise Conflict(f"{path} is a directory; remove it with rmdir", field="path")
    row.delete()
    _delete_after_commit([row.storage_key])
    _announce(thread, path, "deleted")
    return True


def _announce(thread: Thread, path: str, change: str) -> None:
    """Publish ``file.changed`` (path and what happened) after commit."""
    publish(thread, "file.changed", {"path": path, "change": change})


def file_delete_all(*, thread: Thread) -> None:
    """Delete every stored byte of ``thread`` (and its rows, when they still exist).

    Called after a thread's delete has committed, when its rows are gone: it removes what
    storage holds under ``<tenant id>/<thread id>/``, orphans included. ``thread.id`` must be
    set (Django clears the pk of an instance it deleted: keep a copy of the id).
    """
    if thread.id is None:
        raise ValueError("file_delete_all needs the thread id (it was cleared by delete())")
    rows = ThreadFile.objects.filter(tenant_id=thread.tenant_id, thread_id=thread.id)
    keys = set(rows.exclude(storage_key="").values_list("storage_key", flat=True))
    rows.delete()
    prefix = _thread_prefix(thread.tenant_id, thread.id)
    try:
        _, names = default_storage.listdir(prefix)
    except (FileNotFoundError, NotADirectoryError):
        names = []
    keys.update(f"{prefix}/{name}" for name in names)
    for key in sorted(keys):
        _delete_quietly(key)


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
