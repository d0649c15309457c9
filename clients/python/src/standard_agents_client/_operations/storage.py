"""What a thread stores: its files, its KV values, and env variables (the thread's and
the tenant's)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import IO, Any, Literal

from standard_agents_client._call import (
    Call,
    Download,
    Upload,
    body,
    json_text,
    query,
    read_bytes,
    read_json,
    read_nothing,
    read_page,
    segment,
    subpath,
)
from standard_agents_client.pagination import Page
from standard_agents_client.types import (
    EnvEntry,
    EnvType,
    FileEntry,
    FileStats,
    FoundPath,
    GrepHit,
    KvValue,
)

# Files ----------------------------------------------------------------------------------------


def _fs(thread_id: str, path: str) -> str:
    inner = subpath(path)
    return f"/threads/{segment(thread_id)}/fs" + (f"/{inner}" if inner else "")


def file_upload(
    thread_id: str,
    path: str,
    data: bytes | str | os.PathLike[str] | IO[bytes],
    *,
    mime_type: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Call[FileEntry]:
    """Write a file at ``path`` (created, or replaced): ``data`` is bytes, a local file's
    path, or an open binary file, streamed. Without ``mime_type`` the server takes the
    type the name says (else ``application/octet-stream``)."""
    upload = Upload.of(data)
    if metadata is not None:
        name = PurePosixPath(path).name or "file"
        fields = body(metadata=json_text(metadata), mime_type=mime_type)
        files = {"file": (name, upload, mime_type)}
        return Call("PUT", _fs(thread_id, path), read_json, files=files, data=fields)
    headers = {"Content-Type": mime_type} if mime_type else {}
    return Call("PUT", _fs(thread_id, path), read_json, content=upload, headers=headers)


def file_download(
    thread_id: str, path: str, *, range: tuple[int, int | None] | None = None
) -> Call[bytes]:
    """A file's bytes; ``range=(first, last)`` (inclusive; ``last`` None: to the end)
    fetches a part (``RangeNotSatisfiable`` outside the file)."""
    headers = {}
    if range is not None:
        first, last = range
        headers["Range"] = f"bytes={first}-{'' if last is None else last}"
    return Call("GET", _fs(thread_id, path), read_bytes, headers=headers)


def file_download_to(
    thread_id: str, path: str, destination: str | os.PathLike[str] | IO[bytes]
) -> Download:
    """Stream a file to ``destination`` (a local path, or an open binary file) without
    holding it in memory; answers the number of bytes written."""
    return Download(file_download(thread_id, path), destination)


def file_stat(thread_id: str, path: str) -> Call[FileEntry]:
    """The record of a file or directory (``NotFound`` when nothing is there)."""
    return Call("GET", _fs(thread_id, path), read_json, query(stat=True))


def file_list(
    thread_id: str, path: str = "/", *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[FileEntry]]:
    """The entries of a directory (default: the root)."""
    return Call("GET", _fs(thread_id, path), read_page, query(limit=limit, cursor=cursor))


def file_mkdir(thread_id: str, path: str) -> Call[FileEntry]:
    """Create a directory (and its parents); idempotent."""
    return Call("POST", _fs(thread_id, path), read_json, json={"type": "directory"})


def file_delete(thread_id: str, path: str) -> Call[None]:
    """Delete a file, or an empty directory (``Conflict`` when it is not empty)."""
    return Call("DELETE", _fs(thread_id, path), read_nothing)


def file_thumbnail(thread_id: str, path: str, *, size: int | None = None) -> Call[bytes]:
    """A PNG or JPEG thumbnail of an image, its longest side ``size`` (default 256)."""
    return Call("GET", _fs(thread_id, path), read_bytes, query(thumbnail=True, size=size))


def file_stats(thread_id: str) -> Call[FileStats]:
    """How many files and directories the thread has, and their total size."""
    return Call("GET", f"/threads/{segment(thread_id)}/fs-stats", read_json)


def file_grep(
    thread_id: str,
    text: str,
    *,
    path: str | None = None,
    max_matches: int | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[GrepHit]]:
    """The text files under ``path`` (default: everywhere) holding ``text`` (plain,
    case-sensitive), by path, each with its matching lines; the search stops after
    ``max_matches`` matching lines in all (default 100)."""
    params = query(grep=text, path=path, max_matches=max_matches, limit=limit, cursor=cursor)
    return Call("GET", f"/threads/{segment(thread_id)}/fs-search", read_page, params)


def file_find(
    thread_id: str,
    pattern: str,
    *,
    type: Literal["file", "directory", "all"] | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[FoundPath]]:
    """The files and/or directories whose path matches a glob (``*``, ``**``, ``?``), by
    path."""
    params = query(find=pattern, type=type, limit=limit, cursor=cursor)
    return Call("GET", f"/threads/{segment(thread_id)}/fs-search", read_page, params)


# KV -------------------------------------------------------------------------------------------


def kv_list(
    thread_id: str,
    *,
    search: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[KvValue]]:
    """The thread's KV values; ``search`` keeps the keys that contain it."""
    params = query(search=search, limit=limit, cursor=cursor)
    return Call("GET", f"/threads/{segment(thread_id)}/kv", read_page, params)


def kv_get(thread_id: str, key: str) -> Call[KvValue]:
    """One KV value (``NotFound`` when the key is not set)."""
    return Call("GET", f"/threads/{segment(thread_id)}/kv/{subpath(key)}", read_json)


def kv_set(
    thread_id: str, key: str, value: Any, *, previous_key: str | None = None
) -> Call[KvValue]:
    """Set a KV value (any JSON but null; :func:`kv_delete` deletes). With
    ``previous_key`` the value at that key moves to ``key`` first."""
    if value is None:
        raise ValueError("a KV value cannot be None: delete the key instead")
    payload = {"value": value, **body(previous_key=previous_key)}
    path = f"/threads/{segment(thread_id)}/kv/{subpath(key)}"
    return Call("PUT", path, read_json, json=payload)


def kv_delete(thread_id: str, key: str) -> Call[None]:
    """Delete a KV value (``NotFound`` when the key is not set)."""
    return Call("DELETE", f"/threads/{segment(thread_id)}/kv/{subpath(key)}", read_nothing)


# Env ------------------------------------------------------------------------------------------


def thread_env_list(
    thread_id: str, *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[EnvEntry]]:
    """The thread's env variables: names and types, never values."""
    params = query(limit=limit, cursor=cursor)
    return Call("GET", f"/threads/{segment(thread_id)}/env", read_page, params)


def thread_env_set(
    thread_id: str, name: str, value: str, *, type: EnvType | None = None
) -> Call[EnvEntry]:
    """Set a thread env variable (``type`` omitted keeps the existing type; a new one is
    ``secret``)."""
    path = f"/threads/{segment(thread_id)}/env/{segment(name)}"
    return Call("PUT", path, read_json, json={"value": value, **body(type=type)})


def thread_env_delete(thread_id: str, name: str) -> Call[None]:
    """Delete a thread env variable."""
    return Call("DELETE", f"/threads/{segment(thread_id)}/env/{segment(name)}", read_nothing)


def tenant_env_list(*, limit: int | None = None, cursor: str | None = None) -> Call[Page[EnvEntry]]:
    """The tenant's env variables (the tenant level of env lookups): names and types."""
    return Call("GET", "/env", read_page, query(limit=limit, cursor=cursor))


def tenant_env_set(name: str, value: str, *, type: EnvType | None = None) -> Call[EnvEntry]:
    """Set a tenant env variable (admins)."""
    return Call("PUT", f"/env/{segment(name)}", read_json, json={"value": value, **body(type=type)})


def tenant_env_delete(name: str) -> Call[None]:
    """Delete a tenant env variable (admins)."""
    return Call("DELETE", f"/env/{segment(name)}", read_nothing)
