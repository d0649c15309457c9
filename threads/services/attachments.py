"""Message and tool-result attachments: files under ``/attachments/`` named by AttachmentRefs.

An AttachmentRef (spec §13) is ``{id, type: "file", path, name, mimeType, size, width?,
height?}``; the bytes live in the thread's file system, so a message only names them.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import re
import secrets
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from common.errors import NotFound, ValidationFailed
from common.time import now_us
from threads.models import Thread, ThreadFile
from threads.services.files import file_read, file_stat, file_write

ATTACHMENTS_DIR = "/attachments"
MAX_ATTACHMENTS = 20  # per message or tool result
_STEM = re.compile(r"[^A-Za-z0-9._-]+")


def attachment_ref(record: ThreadFile) -> dict[str, Any]:
    ref: dict[str, Any] = {
        "id": str(record.id),
        "type": "file",
        "path": record.path,
        "name": record.name,
        "mimeType": record.mime_type,
        "size": record.size,
    }
    if record.width is not None and record.height is not None:
        ref.update(width=record.width, height=record.height)
    return ref


def _decode(data: object, field: str) -> bytes:
    if not isinstance(data, str):
        raise ValidationFailed("data must be a base64 string", field=field)
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValidationFailed(f"data is not valid base64: {error}", field=field) from error


def _attachment_path(name: str, mime_type: str) -> str:
    """``/attachments/<stem>-<8 hex>.<ext>`` (uploads without a usable stem get a timestamp)."""
    pure = PurePosixPath(name)
    stem = _STEM.sub("-", pure.stem).strip("-.")[:64] or str(now_us() // 1000)
    extension = pure.suffix.lower() or (mimetypes.guess_extension(mime_type) or ".bin")
    return f"{ATTACHMENTS_DIR}/{stem}-{secrets.token_hex(4)}{extension}"


def attachments_store(
    *, thread: Thread, items: Sequence[Mapping[str, Any]], field: str = "attachments"
) -> list[dict[str, Any]]:
    """Store inline attachments (``{name, mimeType, data (base64), width?, height?}``) and
    resolve references (``{type: "file", path}``) of files the thread already has.

    Returns AttachmentRefs in the given order. Raises ValidationFailed naming
    ``attachments[i].<key>`` for a malformed item, NotFound for a reference to a missing
    file, LimitExceeded (from the file store) for an oversized file.
    """
    if len(items) > MAX_ATTACHMENTS:
        raise ValidationFailed(f"at most {MAX_ATTACHMENTS} attachments", field=field)
    refs: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        where = f"{field}[{index}]"
        if not isinstance(item, Mapping):
            raise ValidationFailed("an attachment must be an object", field=where)
        if item.get("type") == "file" or ("path" in item and "data" not in item):
            refs.append(attachment_at(thread=thread, path=item.get("path"), field=f"{where}.path"))
            continue
        name = item.get("name")
        mime_type = item.get("mimeType")
        if not isinstance(name, str) or not name.strip():
            raise ValidationFailed("name is required", field=f"{where}.name")
        if not isinstance(mime_type, str) or "/" not in mime_type:
            raise ValidationFailed("mimeType must be a MIME type", field=f"{where}.mimeType")
        record = file_write(
            thread=thread,
            path=_attachment_path(name, mime_type),
            data=_decode(item.get("data"), f"{where}.data"),
            mime_type=mime_type,
            width=item.get("width"),
            height=item.get("height"),
        )
        refs.append({**attachment_ref(record), "name": name})
    return refs


def attachment_at(*, thread: Thread, path: object, field: str = "path") -> dict[str, Any]:
    """The AttachmentRef of an existing file. NotFound when there is none at ``path``."""
    if not isinstance(path, str):
        raise ValidationFailed("path must be a string", field=field)
    record = file_stat(thread=thread, path=path)
    if record is None or record.is_directory:
        raise NotFound(f"no file at {path}", field=field)
    return attachment_ref(record)


def attachments_copy(
    *, source: Thread, target: Thread, refs: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Copy the files named by ``refs`` (AttachmentRefs of ``source``) into ``target``'s
    ``/attachments/`` under fresh paths (spec DIGEST §13: a path of one thread is not valid
    in another); returns the AttachmentRefs in ``target``. NotFound for a missing file."""
    copied: list[dict[str, Any]] = []
    for index, ref in enumerate(refs):
        path = ref.get("path")
        data = file_read(thread=source, path=path) if isinstance(path, str) else None
        if data is None:
            raise NotFound(f"no file at {path}", field=f"attachments[{index}]")
        name = str(ref.get("name") or PurePosixPath(str(path)).name)
        mime_type = str(ref.get("mimeType") or "application/octet-stream")
        record = file_write(
            thread=target, path=_attachment_path(name, mime_type), data=data,
            mime_type=mime_type, width=ref.get("width"), height=ref.get("height"),
        )  # fmt: skip
        copied.append({**attachment_ref(record), "name": name})
    return copied
