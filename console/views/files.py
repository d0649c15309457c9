"""A thread's files in the console: browse a directory, download, image thumbnails,
upload, make a directory, delete.

Each page reads and writes through the services behind the API's ``fs`` routes: the same
validation, the same events, another tenant's thread a 404. A refusal is shown at the form
field it names, or as the page's message.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from common.errors import DomainError, NotFound
from common.time import from_us
from console.scope import console_of, console_view
from console.views.common import THREAD, answer, refuse_at_field, tenant_thread, thread_page
from threads.api.file_transfer import file_download_response
from threads.models import Thread, ThreadFile
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

ROWS_PER_PAGE = 100
THUMBNAIL_SIDE = 128  # the listing's thumbnails, shown at half that size


class UploadForm(forms.Form):
    file = forms.FileField(
        label="File", allow_empty_file=True,
        widget=forms.FileInput(attrs={"aria-describedby": "upload-help"}),
        help_text=f"Up to {MAX_FILE_BYTES // 2**20} MiB (MAX_FILE_BYTES); "
        "a file of the same name is replaced.",
    )  # fmt: skip


class DirectoryForm(forms.Form):
    name = forms.CharField(label="Directory name")


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
    return thread_page(
        request, "console/storage/files.html", thread, "console:thread-files",
        {"where": where, "crumbs": [] if problem else _crumbs(where), "rows": rows,
         "page": listing, "problem": problem, "thumbnail_side": THUMBNAIL_SIDE,
         "upload": upload or UploadForm(), "directory": directory or DirectoryForm()}, status,
    )  # fmt: skip


@require_GET
@console_view()
def files_page(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """A directory of the thread's files (``?path=``, the root by default)."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    return _files_page(request, thread, request.GET.get("path") or "/")


@require_GET
@console_view()
def file_download(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponseBase:
    """The file at ``?path=``, streamed as an attachment, as ``GET …/fs/<path>`` streams it
    (with ``Range``)."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    try:
        opened = file_open(thread=thread, path=request.GET.get("path", ""))
    except DomainError as error:
        raise Http404(error.message) from error
    if opened is None:
        raise Http404("no such file")
    return file_download_response(request, *opened)


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
        refuse_at_field(form, error, {"data": "file", "path": "file", "mime_type": "file"})
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
        refuse_at_field(form, error, {"path": "name"})
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


urlpatterns = [
    path(THREAD + "files/", files_page, name="thread-files"),
    path(THREAD + "files/download/", file_download, name="thread-file-download"),
    path(THREAD + "files/thumbnail/", file_thumbnail_view, name="thread-file-thumbnail"),
    path(THREAD + "files/upload/", file_upload, name="thread-file-upload"),
    path(THREAD + "files/mkdir/", file_mkdir_view, name="thread-file-mkdir"),
    path(THREAD + "files/delete/", file_delete, name="thread-file-delete"),
]
