"""Bytes in Django's default storage and the ThreadFile rows that hold the tree.

Bytes are stored under ``<tenant id>/<thread id>/<uuid>``; a write streams its input
through :class:`_CappedReader`, which raises LimitExceeded past ``MAX_FILE_BYTES`` (read
from :mod:`.validation` when a write runs). The row helpers scope every query to the
thread's tenant and create missing directories.
"""

from __future__ import annotations

import contextlib
import io
import uuid
from collections.abc import Iterable, Iterator
from typing import IO, Any, Protocol, cast

from django.core.files.base import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import QuerySet
from PIL import Image, UnidentifiedImageError

from common.errors import Conflict, LimitExceeded
from threads.models import Thread, ThreadFile
from threads.services.files import validation
from threads.services.files.validation import _COPY_CHUNK, _ancestors, _split

# Types -----------------------------------------------------------------------------------


class _Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


FileData = bytes | bytearray | memoryview | _Readable | Iterable[bytes]


# Storage ---------------------------------------------------------------------------------


def _storage_name() -> str:
    """The FileRecord ``storage`` of new bytes: ``s3`` for S3-backed storage, else ``local``."""
    return "s3" if "s3" in type(default_storage).__name__.lower() else "local"


def _thread_prefix(tenant_id: object, thread_id: object) -> str:
    return f"{tenant_id}/{thread_id}"


def _limit_error(size: int) -> LimitExceeded:
    cap = validation.MAX_FILE_BYTES
    return LimitExceeded(
        f"file is larger than the cap MAX_FILE_BYTES ({cap} bytes; got {size}+)",
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
        if self.size > validation.MAX_FILE_BYTES:
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
        transaction.on_commit(delete, robust=True)


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
