"""Writes of a thread's file system: write, mkdir, rmdir, unlink and delete-all.

Writes run under ``transaction.atomic``; each records its ``file.changed`` event in it.
Replaced or removed bytes are deleted from storage after commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction

from common.errors import Conflict, NotFound, ValidationFailed
from common.time import now_us
from threads.events import Outbox, publish
from threads.models import Thread, ThreadFile
from threads.services.fence import terminated_check
from threads.services.files.storage import (
    FileData,
    _delete_after_commit,
    _delete_quietly,
    _ensure_directory,
    _ensure_parents,
    _image_size,
    _root,
    _rows,
    _storage_name,
    _store,
    _thread_prefix,
)
from threads.services.files.validation import (
    _dimension,
    _metadata,
    _mime_type,
    _split,
    is_image_mime_type,
    normalize_path,
)

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
    outbox: Outbox | None = None,
) -> ThreadFile:
    """Write (create or replace) the file at ``path`` and return its row; ``outbox`` is the
    running turn's (its ids go on the event).

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
    terminated_check(thread=thread, what="files")
    path = normalize_path(path)
    if path == "/":
        raise Conflict("/ is a directory", field="path")
    mime_type = _mime_type(mime_type, path)
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
            _announce(thread, row.path, "written", outbox)
            return row
    except BaseException:
        _delete_quietly(key)
        raise


def _upsert(
    thread: Thread, path: str, key: str, size: int, mime_type: str,
    metadata: dict[str, Any], width: int | None, height: int | None,
) -> ThreadFile:  # fmt: skip
    parent_path, name = _split(path)
    written = now_us()
    fields = {
        "mime_type": mime_type, "size": size, "storage": _storage_name(), "storage_key": key,
        "metadata": metadata, "width": width, "height": height, "updated_at": written,
    }  # fmt: skip
    row = _rows(thread).select_for_update().filter(path=path).first()
    if row is None:
        try:
            with transaction.atomic():
                return ThreadFile.objects.create(
                    tenant_id=thread.tenant_id, thread=thread, path=path,
                    parent_path=parent_path, name=name, created_at=written,
                    **fields,
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
def file_mkdir(*, thread: Thread, path: str, outbox: Outbox | None = None) -> ThreadFile:
    """Create the directory ``path`` and its missing parents; an existing directory is
    returned as is. Raises Conflict when a file is at ``path`` or above it."""
    terminated_check(thread=thread, what="files")
    path = normalize_path(path)
    if path == "/":
        return _root(thread)
    _ensure_parents(thread, path)
    row = _ensure_directory(thread, path)
    _announce(thread, row.path, "created", outbox)
    return row


@transaction.atomic
def file_rmdir(*, thread: Thread, path: str, outbox: Outbox | None = None) -> None:
    """Remove the empty directory ``path``.

    Raises NotFound (no such directory), Conflict (a file, or not empty: the message
    names how many entries it holds), ValidationFailed (the root).
    """
    terminated_check(thread=thread, what="files")
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
    _announce(thread, path, "deleted", outbox)


@transaction.atomic
def file_unlink(*, thread: Thread, path: str, outbox: Outbox | None = None) -> bool:
    """Delete the file at ``path`` and (after commit) its bytes; False when there is none.
    Raises Conflict when ``path`` is a directory (use :func:`file_rmdir`)."""
    terminated_check(thread=thread, what="files")
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
    _announce(thread, path, "deleted", outbox)
    return True


def _announce(thread: Thread, path: str, change: str, outbox: Outbox | None) -> None:
    """Publish ``file.changed`` (path and what happened) after commit."""
    publish(thread, "file.changed", {"path": path, "change": change}, outbox=outbox)


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
