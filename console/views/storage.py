"""A thread's storage in the console: its files, its KV values and its env variables.

Each page reads and writes through the services behind the API's ``fs``, ``kv`` and ``env``
routes: the same validation, the same events, another tenant's thread a 404. A refusal is
shown at the form field it names, or as the page's message. Env values are write-only: no
page ever holds one, not even the form that set it.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

from asgiref.sync import sync_to_async
from django import forms
from django.contrib import messages
from django.core.handlers.asgi import ASGIRequest
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.http import content_disposition_header, urlencode
from django.views.decorators.http import require_GET, require_POST

from common.errors import DomainError, NotFound
from common.time import from_us
from console.scope import console_of, console_view
from console.views.common import answer, tenant_thread, thread_page
from threads.models import Thread, ThreadFile, ThreadValue
from threads.services.env import (
    EnvEntry,
    env_entry_of,
    tenant_env_rows,
    thread_env_delete,
    thread_env_rows,
    thread_env_set,
)
from threads.services.files import (
    MAX_FILE_BYTES,
    MAX_THUMBNAIL_SIDE,
    file_mkdir,
    file_open,
    file_readdir,
    file_rmdir,
    file_stat,
    file_thumbnail,
    file_unlink,
    file_write,
    is_image_mime_type,
    normalize_path,
    thumbnail_mime_type,
)
from threads.services.values import value_delete, value_list, value_of, value_set, value_stored

ROWS_PER_PAGE = 100
THUMBNAIL_SIDE = 128  # the listing's thumbnails, shown at half that size
DOWNLOAD_CHUNK = 256 * 1024


# Forms ---------------------------------------------------------------------------------------


class UploadForm(forms.Form):
    file = forms.FileField(
        label="File", allow_empty_file=True,
        widget=forms.FileInput(attrs={"aria-describedby": "upload-help"}),
        help_text=f"Up to {MAX_FILE_BYTES // 2**20} MiB (MAX_FILE_BYTES); "
        "a file of the same name is replaced.",
    )  # fmt: skip


class DirectoryForm(forms.Form):
    name = forms.CharField(label="Directory name")


class ValueForm(forms.Form):
    key = forms.CharField(label="Key", strip=False)
    value = forms.CharField(
        label="Value (JSON)", strip=False,
        widget=forms.Textarea(attrs={"rows": 6, "aria-describedby": "value-help"}),
        help_text='Any JSON: "text", 42, [1, 2], {"on": true}. null deletes the key.',
    )  # fmt: skip

    def clean_value(self) -> Any:
        try:
            return json.loads(self.cleaned_data["value"])
        except ValueError as error:
            raise forms.ValidationError(f"value is not JSON: {error}") from error


class EnvForm(forms.Form):
    name = forms.CharField(
        label="Name", widget=forms.TextInput(attrs={"aria-describedby": "id_name-help"}),
        help_text="Letters, digits and _, not starting with a digit.",
    )  # fmt: skip
    type = forms.ChoiceField(
        label="Type", required=False,
        widget=forms.Select(attrs={"aria-describedby": "id_type-help"}),
        choices=[("", "unchanged (a new one is secret)"), ("secret", "secret"), ("text", "text")],
        help_text="text may appear in prompts and tool output; secret only inside tools.",
    )  # fmt: skip
    value = forms.CharField(
        label="Value", required=False, strip=False,
        widget=forms.PasswordInput(
            attrs={"autocomplete": "new-password", "aria-describedby": "id_value-help"}
        ),
        help_text="Write-only: it is stored encrypted and never shown again.",
    )  # fmt: skip


def _refused(form: forms.Form, error: DomainError, fields: Mapping[str, str]) -> None:
    """Show a service's refusal at the form field it names (``fields`` maps the service's
    field names to the form's), else above the form."""
    name = fields.get(error.field or "", error.field or "")
    form.add_error(name if name in form.fields else None, error.message)


# Files ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileRow:
    entry: ThreadFile
    updated: dt.datetime
    image: bool


def _crumbs(where: str) -> list[tuple[str, str]]:
    """``(label, path)`` of ``where`` and each directory above it, the root first."""
    parts = [part for part in where.split("/") if part]
    return [("root", "/")] + [
        (part, "/" + "/".join(parts[: n + 1])) for n, part in enumerate(parts)
    ]


def _files_url(thread: Thread, where: str) -> str:
    url = reverse("console:thread-files", args=[thread.pk])
    return url if where == "/" else f"{url}?{urlencode({'path': where})}"


def _files_page(
    request: HttpRequest, thread: Thread, raw_path: str, *,
    upload: UploadForm | None = None, directory: DirectoryForm | None = None, status: int = 200,
) -> HttpResponse:  # fmt: skip
    """The listing of directory ``raw_path``, directories first, with the write forms."""
    problem = None
    try:
        where = normalize_path(raw_path)
        entries = file_readdir(thread=thread, path=where)
    except DomainError as error:
        where = "/"
        entries, problem, status = [], error.message, error.status
    entries.sort(key=lambda row: (not row.is_directory, row.name))
    listing = Paginator(entries, ROWS_PER_PAGE).get_page(request.GET.get("page"))
    rows = [
        FileRow(row, from_us(row.updated_at), is_image_mime_type(row.mime_type)) for row in listing
    ]
    response = thread_page(
        request, "console/storage/files.html", thread, "console:thread-files",
        {"where": where, "crumbs": [] if problem else _crumbs(where), "rows": rows,
         "page": listing, "problem": problem, "thumbnail_side": THUMBNAIL_SIDE,
         "upload": upload or UploadForm(), "directory": directory or DirectoryForm()},
    )  # fmt: skip
    response.status_code = status
    return response


@require_GET
@console_view()
def files_page(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """A directory of the thread's files (``?path=``, the root by default)."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    return _files_page(request, thread, request.GET.get("path") or "/")


def _chunks(handle: IO[bytes]) -> Iterator[bytes]:
    with handle:
        while data := handle.read(DOWNLOAD_CHUNK):
            yield data


async def _async_chunks(handle: IO[bytes]) -> AsyncIterator[bytes]:
    """Under ASGI Django would gather a sync iterator into one list: read in a thread."""
    read = sync_to_async(handle.read, thread_sensitive=False)
    try:
        while data := await read(DOWNLOAD_CHUNK):
            yield data
    finally:
        handle.close()


@require_GET
@console_view()
def file_download(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """The file at ``?path=``, streamed as an attachment (as ``GET …/fs/<path>`` streams it)."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    try:
        opened = file_open(thread=thread, path=request.GET.get("path", ""))
    except DomainError as error:
        raise Http404(error.message) from error
    if opened is None:
        raise Http404("no such file")
    row, handle = opened
    content = _async_chunks(handle) if isinstance(request, ASGIRequest) else _chunks(handle)
    response = StreamingHttpResponse(
        content, content_type=row.mime_type or "application/octet-stream"
    )
    response._resource_closers.append(handle.close)  # type: ignore[attr-defined]
    response["Content-Length"] = str(row.size)
    response["Content-Disposition"] = content_disposition_header(True, row.name) or "attachment"
    response["X-Content-Type-Options"] = "nosniff"
    return response  # type: ignore[return-value]  # console_view is typed for HttpResponse


@require_GET
@console_view()
def file_thumbnail_view(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """A thumbnail of the image at ``?path=``, no larger than ``?size=`` (as the API's
    ``?thumbnail=1&size=…``); 404 when it is not an image."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    try:
        side = int(request.GET.get("size") or THUMBNAIL_SIDE)
        data = file_thumbnail(
            thread=thread, path=request.GET.get("path", ""), max_side=min(side, MAX_THUMBNAIL_SIDE)
        )
    except (ValueError, DomainError) as error:
        raise Http404(str(error)) from error
    if data is None:
        raise Http404("no image there")
    return HttpResponse(data, content_type=thumbnail_mime_type(data))


@require_POST
@console_view(write=True)
def file_upload(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Upload a file into the directory ``path`` (a field of the form), as ``POST
    …/fs/<path>`` does (multipart)."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    where = request.POST.get("path") or "/"
    form = UploadForm(request.POST, request.FILES)
    if not form.is_valid():
        return _files_page(request, thread, where, upload=form, status=400)
    upload = form.cleaned_data["file"]
    try:
        row = file_write(
            thread=thread, path=f"{where}/{upload.name}", data=upload, mime_type=upload.content_type
        )
    except DomainError as error:
        _refused(form, error, {"data": "file", "path": "file", "mime_type": "file"})
        return _files_page(request, thread, where, upload=form, status=error.status)
    finally:
        upload.close()
    replaced = row.created_at != row.updated_at
    messages.success(request, f"{'Replaced' if replaced else 'Uploaded'} {row.path}.")
    return redirect(_files_url(thread, where))


@require_POST
@console_view(write=True)
def file_mkdir_view(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Make the directory ``name`` in the directory ``path`` (a field of the form)."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    where = request.POST.get("path") or "/"
    form = DirectoryForm(request.POST)
    if not form.is_valid():
        return _files_page(request, thread, where, directory=form, status=400)
    try:
        row = file_mkdir(thread=thread, path=f"{where}/{form.cleaned_data['name']}")
    except DomainError as error:
        _refused(form, error, {"path": "name"})
        return _files_page(request, thread, where, directory=form, status=error.status)
    messages.success(request, f"Made the directory {row.path}.")
    return redirect(_files_url(thread, where))


@require_POST
@console_view(write=True)
def file_delete(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Delete the file or empty directory at ``path`` (``DELETE …/fs/<path>``)."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    target = request.POST.get("path", "")
    parent = target.rstrip("/").rpartition("/")[0] or "/"

    def delete() -> dict[str, Any]:
        row = file_stat(thread=thread, path=target)
        if row is None:
            raise NotFound(f"no file or directory {target}")
        if row.is_directory:
            file_rmdir(thread=thread, path=row.path)
        else:
            file_unlink(thread=thread, path=row.path)
        messages.success(request, f"Deleted {row.path}.")
        return {"path": row.path}

    return answer(request, _files_url(thread, parent), delete)


# KV ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValueRow:
    key: str
    text: str  # the value as indented JSON, or why it cannot be read
    readable: bool
    size: int
    updated: dt.datetime


def _value_row(thread: Thread, row: ThreadValue) -> ValueRow:
    try:
        text, readable = json.dumps(value_of(thread=thread, row=row).value, indent=2), True
    except DomainError as error:
        text, readable = error.message, False
    return ValueRow(row.key, text, readable, row.size, from_us(row.updated_at))


def _kv_page(
    request: HttpRequest, thread: Thread, form: ValueForm, status: int = 200
) -> HttpResponse:
    search = request.GET.get("q", "").strip()
    listing = Paginator(value_list(thread=thread, search=search or None), ROWS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    response = thread_page(
        request, "console/storage/kv.html", thread, "console:thread-kv",
        {"values": [_value_row(thread, row) for row in listing], "page": listing,
         "q": search, "form": form},
    )  # fmt: skip
    response.status_code = status
    return response


@require_GET
@console_view()
def kv_page(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """The thread's KV values by key (``?q=`` keeps the keys that hold it); ``?edit=KEY``
    fills the form with that key's value."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    initial = {}
    if edit := request.GET.get("edit"):
        try:
            stored = value_stored(thread=thread, key=edit)
        except DomainError:
            stored = None
        if stored is not None:
            initial = {"key": stored.key, "value": json.dumps(stored.value, indent=2)}
    return _kv_page(request, thread, ValueForm(initial=initial))


@require_POST
@console_view(write=True)
def kv_set(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Set ``key`` to ``value`` (JSON; null deletes it), as ``PUT …/kv/<key>``."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    form = ValueForm(request.POST)
    if not form.is_valid():
        return _kv_page(request, thread, form, status=400)
    key, value = form.cleaned_data["key"], form.cleaned_data["value"]
    try:
        value_set(thread=thread, key=key, value=value)
    except DomainError as error:
        _refused(form, error, {})
        return _kv_page(request, thread, form, status=error.status)
    messages.success(request, f"{'Deleted' if value is None else 'Set'} {key}.")
    return redirect("console:thread-kv", thread_id=thread.pk)


@require_POST
@console_view(write=True)
def kv_delete(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Delete ``key`` (``DELETE …/kv/<key>``)."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    key = request.POST.get("key", "")

    def delete() -> dict[str, Any]:
        if value_stored(thread=thread, key=key) is None:
            raise NotFound(f"no KV key {key!r} in this thread")
        value_delete(thread=thread, key=key)
        messages.success(request, f"Deleted {key}.")
        return {"key": key}

    return answer(request, reverse("console:thread-kv", args=[thread.pk]), delete)


# Env -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvRow:
    """A variable as the page shows it: never its value."""

    name: str
    type: str
    updated: dt.datetime
    overridden: bool = False  # a tenant variable the thread has one of its own for


def _env_row(entry: EnvEntry, overridden: bool = False) -> EnvRow:
    return EnvRow(entry.name, entry.type, from_us(entry.updated_at), overridden)


def _env_page(
    request: HttpRequest, thread: Thread, form: EnvForm, status: int = 200
) -> HttpResponse:
    own = [_env_row(env_entry_of(row)) for row in thread_env_rows(thread=thread)]
    names = {row.name for row in own}
    inherited = [
        _env_row(entry, entry.name in names)
        for entry in map(env_entry_of, tenant_env_rows(tenant=thread.tenant))
    ]
    response = thread_page(
        request, "console/storage/env.html", thread, "console:thread-env",
        {"variables": own, "inherited": inherited, "form": form},
    )  # fmt: skip
    response.status_code = status
    return response


@require_GET
@console_view()
def env_page(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """The thread's variables and the tenant's it inherits: names and types only."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    return _env_page(request, thread, EnvForm(initial={"name": request.GET.get("name", "")}))


@require_POST
@console_view(write=True)
def env_set(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Set a thread variable (``PUT …/env/<name>``); a blank type keeps the existing one."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    form = EnvForm(request.POST)
    if not form.is_valid():
        return _env_page(request, thread, form, status=400)
    data = form.cleaned_data
    try:
        entry = thread_env_set(
            thread=thread, name=data["name"], value=data["value"], type=data["type"] or None
        )
    except DomainError as error:
        _refused(form, error, {})
        return _env_page(request, thread, form, status=error.status)
    messages.success(request, f"Set {entry.name} ({entry.type}).")
    return redirect("console:thread-env", thread_id=thread.pk)


@require_POST
@console_view(write=True)
def env_delete(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Delete a thread variable (``DELETE …/env/<name>``)."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    name = request.POST.get("name", "")

    def delete() -> dict[str, Any]:
        if not thread_env_delete(thread=thread, name=name):
            raise NotFound(f"no environment variable {name} on this thread")
        messages.success(request, f"Deleted {name}.")
        return {"name": name}

    return answer(request, reverse("console:thread-env", args=[thread.pk]), delete)


THREAD = "threads/<uuid:thread_id>/"

urlpatterns = [
    path(THREAD + "files/", files_page, name="thread-files"),
    path(THREAD + "files/download/", file_download, name="thread-file-download"),
    path(THREAD + "files/thumbnail/", file_thumbnail_view, name="thread-file-thumbnail"),
    path(THREAD + "files/upload/", file_upload, name="thread-file-upload"),
    path(THREAD + "files/mkdir/", file_mkdir_view, name="thread-file-mkdir"),
    path(THREAD + "files/delete/", file_delete, name="thread-file-delete"),
    path(THREAD + "kv/", kv_page, name="thread-kv"),
    path(THREAD + "kv/set/", kv_set, name="thread-kv-set"),
    path(THREAD + "kv/delete/", kv_delete, name="thread-kv-delete"),
    path(THREAD + "env/", env_page, name="thread-env"),
    path(THREAD + "env/set/", env_set, name="thread-env-set"),
    path(THREAD + "env/delete/", env_delete, name="thread-env-delete"),
]
