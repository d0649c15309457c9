"""threads/api/files.py: ``/api/v1/threads/{id}/fs``, ``fs-search`` and ``fs-stats``."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import StreamingHttpResponse
from django.urls import include, path
from PIL import Image
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from tenancy.models import Role, Tenant
from threads.api import files as files_api
from threads.models import Thread, ThreadFile
from threads.services import files
from threads.services.files import file_mkdir, file_read, file_stat, file_write

urlpatterns = [path("api/v1/threads/<uuid:thread_id>/", include(files_api.urlpatterns))]

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _routes(settings: Settings, tmp_path: Path) -> None:
    settings.ROOT_URLCONF = __name__
    settings.MEDIA_ROOT = tmp_path / "media"


FILE_RECORD = [
    "path", "name", "mime_type", "storage", "size", "is_directory", "metadata", "width",
    "height", "created_at", "updated_at",
]  # fmt: skip


def _fs(thread: Thread, rest: str = "") -> str:
    return f"/api/v1/threads/{thread.id}/fs" + (f"/{rest}" if rest else "")


def _body(response: Any) -> bytes:
    if isinstance(response, StreamingHttpResponse):
        return b"".join(response.streaming_content)  # type: ignore[arg-type]
    return bytes(response.content)


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (0, 90, 200)).save(out, format="PNG")
    return out.getvalue()


TRAVERSALS = [
    "..", "../secret", "a/../../b", "%2e%2e/secret", "%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
    "/../../etc/passwd", "a/./b", "a%00b", "a%5cb", "..%5c..%5cwindows%5cwin.ini",
    "x" * 300, "/".join(["abcdefghi"] * 200),
]  # fmt: skip


@pytest.mark.parametrize("raw", TRAVERSALS)
@pytest.mark.parametrize("method", ["get", "put", "delete"])
def test_bad_paths_are_400_naming_path(
    member: APIClient, thread: Thread, raw: str, method: str
) -> None:
    response = getattr(member, method)(_fs(thread, raw))

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "path"
    assert ThreadFile.objects.filter(thread=thread).count() == 0


def test_bad_grep_path_is_400_naming_path(member: APIClient, thread: Thread) -> None:
    response = member.get(f"/api/v1/threads/{thread.id}/fs-search", {"grep": "x", "path": "/.."})

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "path"


def test_raw_upload_stores_body_with_its_content_type(member: APIClient, thread: Thread) -> None:
    response = member.put(_fs(thread, "docs/readme.md"), b"# Hi\n", content_type="text/markdown")

    assert response.status_code == 201
    body = response.json()
    assert set(body) == {
        "path", "name", "mime_type", "storage", "size", "is_directory", "metadata",
        "width", "height", "created_at", "updated_at",
    }  # fmt: skip
    assert (body["path"], body["name"], body["mime_type"], body["size"]) == (
        "/docs/readme.md", "readme.md", "text/markdown", 5,
    )  # fmt: skip
    assert (body["storage"], body["is_directory"], body["metadata"]) == ("local", False, {})
    assert file_read(thread=thread, path="/docs/readme.md") == b"# Hi\n"


@pytest.mark.parametrize(
    ("path", "mime_type"),
    [("images/p.png", "image/png"), ("notes/a.txt", "text/plain"),
     ("notes/b.md", "text/markdown"), ("src/app.ts", "text/typescript"),
     ("conf/c.yml", "application/yaml"), ("data/blob.unknownext", "application/octet-stream")],
)  # fmt: skip
def test_an_upload_without_a_content_type_takes_the_type_its_name_says(
    member: APIClient, thread: Thread, path: str, mime_type: str
) -> None:
    response = member.generic("PUT", _fs(thread, path), _png(3, 2), content_type="")  # type: ignore[arg-type]  # bytes are sent as they are

    assert response.status_code == 201, response.json()
    assert response.json()["mime_type"] == mime_type


def test_replacing_a_file_answers_200_and_keeps_its_creation_time(
    member: APIClient, thread: Thread
) -> None:
    created = member.put(_fs(thread, "notes/a.txt"), b"one", content_type="text/plain")
    replaced = member.put(_fs(thread, "notes/a.txt"), b"two!", content_type="text/plain")

    assert (created.status_code, replaced.status_code) == (201, 200)
    assert replaced.json()["created_at"] == created.json()["created_at"]
    assert replaced.json()["updated_at"] > created.json()["updated_at"]
    assert replaced.json()["size"] == 4
    assert file_read(thread=thread, path="/notes/a.txt") == b"two!"


def test_multipart_upload_takes_file_mime_type_and_metadata(
    member: APIClient, thread: Thread
) -> None:
    upload = SimpleUploadedFile("p.png", _png(30, 20), content_type="image/png")

    response = member.post(
        _fs(thread, "images/p.png"), {"file": upload, "metadata": '{"alt": "blue"}'},
        format="multipart",
    )  # fmt: skip

    assert response.status_code == 201
    body = response.json()
    assert (body["mime_type"], body["width"], body["height"]) == ("image/png", 30, 20)
    assert body["metadata"] == {"alt": "blue"}
    assert file_read(thread=thread, path="/images/p.png") == _png(30, 20)


@pytest.mark.parametrize("metadata", ["[" * 5000 + "]" * 5000, "not json", "[1]"])
def test_upload_metadata_that_is_not_a_json_object_is_a_400_naming_it(
    member: APIClient, thread: Thread, metadata: str
) -> None:
    upload = SimpleUploadedFile("a.txt", b"a", content_type="text/plain")

    response = member.post(
        _fs(thread, "a.txt"), {"file": upload, "metadata": metadata}, format="multipart"
    )

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "metadata"


def test_multipart_without_file_field_is_400(member: APIClient, thread: Thread) -> None:
    response = member.post(_fs(thread, "x.bin"), {"other": "1"}, format="multipart")

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "file"


def test_upload_over_the_cap_is_413_naming_it(
    member: APIClient, thread: Thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files.validation, "MAX_FILE_BYTES", 10)

    response = member.put(_fs(thread, "big.bin"), b"x" * 11, content_type="application/x")

    assert response.status_code == 413
    assert "MAX_FILE_BYTES" in response.json()["error"]["message"]
    assert file_stat(thread=thread, path="/big.bin") is None


def test_download_streams_whole_file_with_headers(member: APIClient, thread: Thread) -> None:
    file_write(thread=thread, path="/d/data.csv", data=b"a,b\n1,2\n", mime_type="text/csv")

    response = member.get(_fs(thread, "d/data.csv"))

    assert response.status_code == 200
    assert response.streaming
    assert _body(response) == b"a,b\n1,2\n"
    assert (response["Content-Type"], response["Content-Length"]) == ("text/csv", "8")
    assert response["Accept-Ranges"] == "bytes"
    assert response["Content-Disposition"] == 'attachment; filename="data.csv"'


@pytest.mark.parametrize(
    ("header", "status", "content", "content_range"),
    [
        ("bytes=2-5", 206, b"2345", "bytes 2-5/10"),
        ("bytes=7-", 206, b"789", "bytes 7-9/10"),
        ("bytes=-3", 206, b"789", "bytes 7-9/10"),
        ("bytes=8-100", 206, b"89", "bytes 8-9/10"),
        ("bytes=-50", 206, b"0123456789", "bytes 0-9/10"),
        ("bytes=0-0", 206, b"0", "bytes 0-0/10"),
        ("bytes=5-2", 200, b"0123456789", None),
        ("bytes=0-1,4-5", 200, b"0123456789", None),
        ("items=0-1", 200, b"0123456789", None),
    ],
)
def test_download_honours_range(
    member: APIClient, thread: Thread, header: str, status: int, content: bytes,
    content_range: str | None,
) -> None:  # fmt: skip
    file_write(thread=thread, path="/digits.txt", data=b"0123456789", mime_type="text/plain")

    response = member.get(_fs(thread, "digits.txt"), HTTP_RANGE=header)

    assert response.status_code == status
    assert _body(response) == content
    assert response["Content-Length"] == str(len(content))
    assert response.get("Content-Range") == content_range


@pytest.mark.parametrize("header", ["bytes=10-", "bytes=10-20", "bytes=-0"])
def test_unsatisfiable_range_is_416(member: APIClient, thread: Thread, header: str) -> None:
    file_write(thread=thread, path="/digits.txt", data=b"0123456789", mime_type="text/plain")

    response = member.get(_fs(thread, "digits.txt"), HTTP_RANGE=header)

    assert response.status_code == 416
    assert response["Content-Range"] == "bytes */10"


def test_stat_and_directory_listing(member: APIClient, thread: Thread) -> None:
    file_write(thread=thread, path="/d/a.txt", data=b"abc", mime_type="text/plain")
    file_mkdir(thread=thread, path="/d/sub")

    stat = member.get(_fs(thread, "d/a.txt"), {"stat": "1"})
    listing = member.get(_fs(thread, "d"))
    root = member.get(_fs(thread))
    missing = member.get(_fs(thread, "nope"))

    assert (stat.status_code, stat.json()["size"], stat.json()["path"]) == (200, 3, "/d/a.txt")
    assert set(stat.json()) == set(FILE_RECORD)
    assert (listing.json()["path"], listing.json()["next"], listing.json()["previous"]) == (
        "/d", None, None,
    )  # fmt: skip
    assert [(e["name"], e["is_directory"]) for e in listing.json()["results"]] == [
        ("a.txt", False), ("sub", True),
    ]  # fmt: skip
    assert listing.json()["results"][0] == stat.json()
    assert [e["path"] for e in root.json()["results"]] == ["/d"]
    assert root.json()["path"] == "/"
    assert missing.status_code == 404


def test_a_directory_lists_by_path_a_page_at_a_time(member: APIClient, thread: Thread) -> None:
    for n in range(5):
        file_write(thread=thread, path=f"/d/f{n}.txt", data=b"x", mime_type="text/plain")

    first = member.get(_fs(thread, "d"), {"limit": 2}).json()
    second = member.get(first["next"]).json()
    last = member.get(second["next"]).json()
    back = member.get(last["previous"]).json()

    assert [e["name"] for e in first["results"]] == ["f0.txt", "f1.txt"]
    assert first["previous"] is None
    assert [e["name"] for e in second["results"]] == ["f2.txt", "f3.txt"]
    assert ([e["name"] for e in last["results"]], last["next"]) == (["f4.txt"], None)
    assert back == second
    assert {first["path"], second["path"], last["path"]} == {"/d"}


@pytest.mark.parametrize(
    ("query", "field"),
    [({"limit": 0}, "limit"), ({"limit": 501}, "limit"), ({"cursor": "bogus"}, "cursor")],
)
def test_a_bad_limit_or_cursor_of_a_listing_is_400_naming_it(
    member: APIClient, thread: Thread, query: dict[str, Any], field: str
) -> None:
    file_mkdir(thread=thread, path="/d")

    responses = [member.get(_fs(thread, "d"), query), member.get(_fs(thread), query)]

    assert [(r.status_code, r.json()["error"]["field"]) for r in responses] == [(400, field)] * 2


def test_post_json_directory_is_mkdir(member: APIClient, thread: Thread) -> None:
    response = member.post(_fs(thread, "a/b"), {"type": "directory"}, format="json")
    again = member.post(_fs(thread, "a/b"), {"type": "directory"}, format="json")
    wrong = member.post(_fs(thread, "c"), {"type": "file"}, format="json")

    assert (response.status_code, again.status_code) == (201, 201)
    assert (response.json()["path"], response.json()["is_directory"]) == ("/a/b", True)
    assert (wrong.status_code, wrong.json()["error"]["field"]) == (400, "type")
    assert file_stat(thread=thread, path="/c") is None


def test_delete_unlinks_files_and_removes_only_empty_directories(
    member: APIClient, thread: Thread
) -> None:
    file_write(thread=thread, path="/d/a.txt", data=b"abc", mime_type="text/plain")

    busy = member.delete(_fs(thread, "d"))
    unlinked = member.delete(_fs(thread, "d/a.txt"))
    removed = member.delete(_fs(thread, "d"))
    missing = member.delete(_fs(thread, "d"))

    assert busy.status_code == 409
    assert "1 entries" in busy.json()["error"]["message"]
    assert (unlinked.status_code, removed.status_code, missing.status_code) == (204, 204, 404)
    assert ThreadFile.objects.filter(thread=thread).count() == 0


def test_thumbnail_of_image_and_404_otherwise(member: APIClient, thread: Thread) -> None:
    file_write(thread=thread, path="/p.png", data=_png(600, 300), mime_type="image/png")
    file_write(thread=thread, path="/t.txt", data=b"hi", mime_type="text/plain")

    thumb = member.get(_fs(thread, "p.png"), {"thumbnail": "1", "size": "100"})
    not_image = member.get(_fs(thread, "t.txt"), {"thumbnail": "1"})

    assert (thumb.status_code, thumb["Content-Type"]) == (200, "image/png")
    with Image.open(io.BytesIO(thumb.content)) as image:
        assert image.size == (100, 50)
    assert not_image.status_code == 404


def test_stats_route(member: APIClient, thread: Thread) -> None:
    file_write(thread=thread, path="/d/a.txt", data=b"abc", mime_type="text/plain")

    response = member.get(f"/api/v1/threads/{thread.id}/fs-stats")

    assert response.json() == {"file_count": 1, "directory_count": 1, "total_size": 3}


def _tree(thread: Thread) -> None:
    """1,000 files: /dir00../dir09, each with 80 .txt + 20 .json); every 7th text file holds
    "needle" on line 2 and, every 21st, again on line 3."""
    for d in range(10):
        for f in range(100):
            number = d * 100 + f
            if f < 80:
                lines = ["alpha", "needle here" if number % 7 == 0 else "hay"]
                if number % 21 == 0:
                    lines.append("second needle")
                file_write(thread=thread, path=f"/dir{d:02}/f{f:03}.txt",
                           data="\n".join(lines).encode(), mime_type="text/plain")  # fmt: skip
            else:
                file_write(thread=thread, path=f"/dir{d:02}/data/f{f:03}.json",
                           data=b'{"needle": 0}', mime_type="application/x-binary")  # fmt: skip


def test_grep_and_find_over_a_thousand_files(member: APIClient, thread: Thread) -> None:
    _tree(thread)
    search = f"/api/v1/threads/{thread.id}/fs-search"

    grep = _all(member, search, {"grep": "needle", "max_matches": "1000", "limit": "500"})
    grep_dir = member.get(search, {"grep": "needle", "path": "/dir03", "max_matches": "1000"})
    capped = member.get(search, {"grep": "needle", "max_matches": "5"}).json()["results"]
    jsons = [r["path"] for r in _all(member, search, {"find": "**/*.json", "limit": "500"})]
    tens = [r["path"] for r in _all(member, search, {"find": "/dir0?/f01?.txt", "type": "file"})]
    dirs = [r["path"] for r in _all(member, search, {"find": "data", "type": "directory"})]

    expected = {
        f"/dir{n // 100:02}/f{n % 100:03}.txt": [2, 3] if n % 21 == 0 else [2]
        for n in range(1000) if n % 100 < 80 and n % 7 == 0
    }  # fmt: skip
    assert {r["path"]: [m["line"] for m in r["matches"]] for r in grep} == expected
    assert [r["path"] for r in grep] == sorted(expected)
    assert grep[0]["matches"] == [
        {"line": 2, "content": "needle here"}, {"line": 3, "content": "second needle"},
    ]  # fmt: skip
    assert [r["path"] for r in grep_dir.json()["results"]] == [
        p for p in sorted(expected) if p.startswith("/dir03/")
    ]
    assert sum(len(r["matches"]) for r in capped) == 5
    assert jsons == [f"/dir{d:02}/data/f{f:03}.json" for d in range(10) for f in range(80, 100)]
    assert tens == [f"/dir{d:02}/f{f:03}.txt" for d in range(10) for f in range(10, 20)]
    assert dirs == [f"/dir{d:02}/data" for d in range(10)]


def _all(member: APIClient, url: str, query: dict[str, str]) -> list[dict[str, Any]]:
    """Every result of a search, following ``next`` to the last page."""
    page = member.get(url, query).json()
    results: list[dict[str, Any]] = page["results"]
    while page["next"] is not None:
        page = member.get(page["next"]).json()
        results += page["results"]
    return results


def test_search_results_page_by_path(member: APIClient, thread: Thread) -> None:
    for n in range(5):
        file_write(thread=thread, path=f"/f{n}.txt", data=b"a\nneedle", mime_type="text/plain")
    search = f"/api/v1/threads/{thread.id}/fs-search"

    grep = member.get(search, {"grep": "needle", "limit": "2"}).json()
    grep_next = member.get(grep["next"]).json()
    found = member.get(search, {"find": "*.txt", "limit": "3"}).json()
    found_next = member.get(found["next"]).json()

    assert grep["results"] == [
        {"path": "/f0.txt", "matches": [{"line": 2, "content": "needle"}]},
        {"path": "/f1.txt", "matches": [{"line": 2, "content": "needle"}]},
    ]
    assert [r["path"] for r in grep_next["results"]] == ["/f2.txt", "/f3.txt"]
    assert "grep=needle" in grep["next"]
    assert found["results"] == [{"path": "/f0.txt"}, {"path": "/f1.txt"}, {"path": "/f2.txt"}]
    assert (found_next["results"], found_next["next"]) == (
        [{"path": "/f3.txt"}, {"path": "/f4.txt"}],
        None,
    )
    assert member.get(found_next["previous"]).json() == found


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"find": "*", "limit": "0"}, "limit"),
        ({"grep": "a", "limit": "501"}, "limit"),
        ({"find": "*", "cursor": "bogus"}, "cursor"),
        ({"grep": "a", "max_matches": "0"}, "max_matches"),
        ({"grep": "a", "max_matches": "10001"}, "max_matches"),
    ],
)
def test_a_bad_page_or_cap_of_a_search_is_400_naming_it(
    member: APIClient, thread: Thread, query: dict[str, str], field: str
) -> None:
    file_write(thread=thread, path="/a.txt", data=b"a", mime_type="text/plain")

    response = member.get(f"/api/v1/threads/{thread.id}/fs-search", query)

    assert (response.status_code, response.json()["error"]["field"]) == (400, field)


def test_search_needs_exactly_one_of_grep_and_find(member: APIClient, thread: Thread) -> None:
    search = f"/api/v1/threads/{thread.id}/fs-search"

    assert member.get(search).status_code == 400
    assert member.get(search, {"grep": "a", "find": "b"}).status_code == 400
    assert member.get(search, {"find": "*", "type": "socket"}).json()["error"]["field"] == "type"


def test_other_tenant_gets_404_on_every_file_route_and_changes_nothing(
    thread: Thread, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    file_write(thread=thread, path="/d/a.txt", data=b"mine", mime_type="text/plain")
    intruder = client_for(other_tenant, Role.ADMIN)
    base = f"/api/v1/threads/{thread.id}"

    answers = [
        intruder.get(f"{base}/fs").status_code,
        intruder.get(f"{base}/fs/d/a.txt").status_code,
        intruder.get(f"{base}/fs/d/a.txt", {"stat": "1"}).status_code,
        intruder.put(f"{base}/fs/d/a.txt", b"theirs", content_type="text/plain").status_code,
        intruder.post(f"{base}/fs/new", {"type": "directory"}, format="json").status_code,
        intruder.delete(f"{base}/fs/d/a.txt").status_code,
        intruder.get(f"{base}/fs-search", {"grep": "mine"}).status_code,
        intruder.get(f"{base}/fs-search", {"find": "*"}).status_code,
        intruder.get(f"{base}/fs-stats").status_code,
    ]

    assert answers == [404] * 9
    assert file_read(thread=thread, path="/d/a.txt") == b"mine"
    assert file_stat(thread=thread, path="/new") is None


def test_read_only_key_reads_but_cannot_write(
    tenant: Tenant, thread: Thread, client_for: Callable[..., APIClient]
) -> None:
    file_write(thread=thread, path="/a.txt", data=b"a", mime_type="text/plain")
    reader = client_for(tenant, Role.READ_ONLY)

    read = reader.get(_fs(thread, "a.txt"))
    upload = reader.put(_fs(thread, "b.txt"), b"b", content_type="text/plain")
    mkdir = reader.post(_fs(thread, "d"), {"type": "directory"}, format="json")
    delete = reader.delete(_fs(thread, "a.txt"))

    assert (read.status_code, _body(read)) == (200, b"a")
    assert (upload.status_code, mkdir.status_code, delete.status_code) == (403, 403, 403)
    assert [row.path for row in ThreadFile.objects.filter(thread=thread)] == ["/a.txt"]


def test_the_root_is_read_only(member: APIClient, thread: Thread) -> None:
    responses = [
        member.put(_fs(thread), b"x", content_type="text/plain"),
        member.post(_fs(thread), {"type": "directory"}, format="json"),
        member.delete(_fs(thread)),
        member.delete(_fs(thread) + "/"),
    ]

    assert [(r.status_code, r["Allow"]) for r in responses] == [(405, "GET, HEAD, OPTIONS")] * 4
    assert member.get(_fs(thread)).status_code == 200
