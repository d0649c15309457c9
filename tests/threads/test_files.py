"""threads/services/files.py: paths, writes, caps and storage layout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_django.fixtures import Settings

from common.errors import Conflict, LimitExceeded, NotFound, ValidationFailed
from tenancy.models import Tenant
from tests.threads.conftest import make_thread
from threads.models import Thread, ThreadFile
from threads.services import files
from threads.services.files import (
    file_delete_all,
    file_find,
    file_mkdir,
    file_read,
    file_rmdir,
    file_stat,
    file_unlink,
    file_write,
    glob_regex,
    normalize_path,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media(settings: Settings, tmp_path: Path) -> Path:
    settings.MEDIA_ROOT = tmp_path / "media"
    return tmp_path / "media"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", "/"), ("/", "/"), ("//", "/"), ("a", "/a"), ("/a/", "/a"), ("a//b///c/", "/a/b/c"),
        ("/ü/名前.txt", "/ü/名前.txt"), ("/a.b/..c/...", "/a.b/..c/..."),
        ("/" + "x" * 255, "/" + "x" * 255),
    ],
)  # fmt: skip
def test_normalize_path_adds_leading_slash_and_collapses_slashes(raw: str, expected: str) -> None:
    assert normalize_path(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "..", "/..", "/a/../b", "/a/../../b", "./a", "/a/.", "a\x00b", "a\nb", "a\x7fb",
        "a\\b", "..\\..\\etc", "/" + "x" * 256, "/" + "é" * 128,
        "/" + "/".join(["abcdefghi"] * 103),
        None, 7,
    ],
)  # fmt: skip
def test_normalize_path_refuses_escapes_controls_and_oversize(raw: Any) -> None:
    with pytest.raises(ValidationFailed) as caught:
        normalize_path(raw)

    assert caught.value.field == "path"


def test_write_creates_parent_directories(thread: Thread) -> None:
    file_write(thread=thread, path="/a/b/c.txt", data=b"x", mime_type="text/plain")

    rows = ThreadFile.objects.filter(thread=thread).order_by("path")
    assert [(r.path, r.parent_path, r.name, r.is_directory) for r in rows] == [
        ("/a", "/", "a", True), ("/a/b", "/a", "b", True), ("/a/b/c.txt", "/a/b", "c.txt", False),
    ]  # fmt: skip


def test_overwrite_replaces_content_and_deletes_old_bytes(
    thread: Thread, media: Path, django_capture_on_commit_callbacks: Any
) -> None:
    first = file_write(thread=thread, path="/f.txt", data=b"old", mime_type="text/plain")
    with django_capture_on_commit_callbacks(execute=True):
        second = file_write(thread=thread, path="/f.txt", data=b"newer", mime_type="text/markdown")

    assert second.pk == first.pk
    assert (second.size, second.mime_type) == (5, "text/markdown")
    assert file_read(thread=thread, path="/f.txt") == b"newer"
    assert not (media / first.storage_key).exists()
    assert ThreadFile.objects.filter(thread=thread).count() == 1


def test_write_over_a_directory_is_a_conflict(thread: Thread, media: Path) -> None:
    file_mkdir(thread=thread, path="/d")

    with pytest.raises(Conflict):
        file_write(thread=thread, path="/d", data=b"x", mime_type="text/plain")

    assert file_stat(thread=thread, path="/d").is_directory is True  # type: ignore[union-attr]
    assert list(media.rglob("*.*")) == []
    assert [p for p in media.rglob("*") if p.is_file()] == []


def test_write_below_a_file_is_a_conflict(thread: Thread) -> None:
    file_write(thread=thread, path="/f", data=b"x", mime_type="text/plain")

    with pytest.raises(Conflict, match="/f is a file"):
        file_write(thread=thread, path="/f/g.txt", data=b"y", mime_type="text/plain")
    with pytest.raises(Conflict):
        file_mkdir(thread=thread, path="/f")


def test_write_streams_an_iterator_of_chunks(thread: Thread) -> None:
    def chunks() -> Iterator[bytes]:
        for index in range(5):
            yield bytes([65 + index]) * 1000

    record = file_write(thread=thread, path="/s.bin", data=chunks(), mime_type=None)

    assert (record.size, record.mime_type) == (5000, "application/octet-stream")
    assert file_read(thread=thread, path="/s.bin") == b"A" * 1000 + b"B" * 1000 + b"C" * 1000 + (
        b"D" * 1000 + b"E" * 1000
    )


def test_write_over_the_size_cap_names_it_and_leaves_nothing(
    thread: Thread, media: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files.validation, "MAX_FILE_BYTES", 10)

    with pytest.raises(LimitExceeded, match="MAX_FILE_BYTES"):
        file_write(
            thread=thread, path="/big.bin", data=iter([b"123456", b"789012"]), mime_type=None
        )

    assert file_stat(thread=thread, path="/big.bin") is None
    assert [p for p in media.rglob("*") if p.is_file()] == []


def test_bytes_are_stored_under_tenant_then_thread(
    tenant: Tenant, thread: Thread, media: Path
) -> None:
    record = file_write(thread=thread, path="//etc/passwd", data=b"x", mime_type="text/plain")

    assert record.path == "/etc/passwd"
    assert record.storage_key.startswith(f"{tenant.id}/{thread.id}/")
    assert (media / str(tenant.id) / str(thread.id)).is_dir()


def test_unlink_of_a_directory_is_a_conflict_and_rmdir_of_a_file_too(thread: Thread) -> None:
    file_write(thread=thread, path="/d/f.txt", data=b"x", mime_type="text/plain")

    with pytest.raises(Conflict):
        file_unlink(thread=thread, path="/d")
    with pytest.raises(Conflict):
        file_rmdir(thread=thread, path="/d/f.txt")
    with pytest.raises(NotFound):
        file_rmdir(thread=thread, path="/missing")
    with pytest.raises(ValidationFailed):
        file_rmdir(thread=thread, path="/")


def test_delete_all_removes_rows_and_every_stored_byte(
    tenant: Tenant, thread: Thread, media: Path
) -> None:
    sibling = make_thread(tenant)
    file_write(thread=thread, path="/a.txt", data=b"a", mime_type="text/plain")
    file_write(thread=thread, path="/d/b.txt", data=b"b", mime_type="text/plain")
    orphan = media / str(tenant.id) / str(thread.id) / "orphan"
    orphan.write_bytes(b"left over")
    kept = file_write(thread=sibling, path="/a.txt", data=b"kept", mime_type="text/plain")

    file_delete_all(thread=thread)

    assert ThreadFile.objects.filter(thread=thread).count() == 0
    assert list((media / str(tenant.id) / str(thread.id)).iterdir()) == []
    assert (media / kept.storage_key).read_bytes() == b"kept"


def test_root_is_an_implicit_directory(thread: Thread) -> None:
    root = file_stat(thread=thread, path="/")

    assert root is not None
    assert (root.path, root.name, root.is_directory) == ("/", "", True)
    assert not ThreadFile.objects.filter(thread=thread, path="/").exists()
    assert file_find(thread=thread, pattern="/") == []


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.txt", "/a.txt", True), ("*.txt", "/d/a.txt", True), ("/*.txt", "/d/a.txt", False),
        ("/d/*", "/d/a.txt", True), ("/d/*", "/d/e/a.txt", False), ("/d/**", "/d/e/a.txt", True),
        ("/**/a.txt", "/a.txt", True), ("a?.txt", "/ab.txt", True), ("a?.txt", "/a/.txt", False),
        ("a.txt", "/xa.txt", False), ("[a].txt", "/[a].txt", True), ("[a].txt", "/a.txt", False),
    ],
)  # fmt: skip
def test_glob_semantics(pattern: str, path: str, matches: bool) -> None:
    assert bool(glob_regex(pattern).fullmatch(path)) is matches
