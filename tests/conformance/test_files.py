"""Threads §8 (File System) and DIGEST §14: one test per ThreadState file operation.

Each test names the clause it proves. The services behind ThreadState live in
threads/services/files.py (``file_<verb>``); the facade maps ``writeFile`` to ``file_write``
and so on.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from pytest_django.fixtures import Settings

from common.errors import Conflict, NotFound
from tenancy.models import Tenant
from tests.threads.conftest import make_thread
from threads.models import Thread
from threads.services.files import (
    FileChunk,
    FileStats,
    GrepMatch,
    GrepResult,
    file_find,
    file_grep,
    file_mkdir,
    file_read,
    file_read_stream,
    file_readdir,
    file_rmdir,
    file_stat,
    file_stats,
    file_thumbnail,
    file_unlink,
    file_write,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media(settings: Settings, tmp_path: Path) -> Path:
    settings.MEDIA_ROOT = tmp_path / "media"
    return tmp_path / "media"


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def test_write_file_returns_the_file_record(thread: Thread) -> None:
    """§8.1/§8.2: writeFile(path, data, mimeType) returns a FileRecord with path, name,
    mimeType, storage, size, isDirectory and metadata."""
    record = file_write(
        thread=thread, path="/data/config.json", data=b'{"key":"value"}',
        mime_type="application/json", metadata={"source": "test"},
    )  # fmt: skip

    assert (record.path, record.name, record.mime_type) == (
        "/data/config.json", "config.json", "application/json",
    )  # fmt: skip
    assert (record.storage, record.size, record.is_directory) == ("local", 15, False)
    assert record.metadata == {"source": "test"}
    assert (record.width, record.height) == (None, None)


def test_write_file_records_image_dimensions_given_or_read(thread: Thread) -> None:
    """§8.1/§8.2: width and height of an image, from the options or (when absent) the image."""
    given = file_write(
        thread=thread, path="/images/a.png", data=_png(4, 3), mime_type="image/png",
        width=1920, height=1080,
    )  # fmt: skip
    read = file_write(thread=thread, path="/images/b.png", data=_png(40, 30), mime_type="image/png")

    assert (given.width, given.height) == (1920, 1080)
    assert (read.width, read.height) == (40, 30)


def test_read_file_returns_content_or_null(thread: Thread) -> None:
    """§8.3: readFile returns the file's bytes, null when the file does not exist."""
    file_write(thread=thread, path="/notes.txt", data=b"hello\n", mime_type="text/plain")
    file_mkdir(thread=thread, path="/dir")

    assert file_read(thread=thread, path="/notes.txt") == b"hello\n"
    assert file_read(thread=thread, path="/missing.txt") is None
    assert file_read(thread=thread, path="/dir") is None


def test_read_file_stream_small_file_is_one_last_chunk(thread: Thread) -> None:
    """§8.8 Small Files: yielded as a single chunk with index 0, totalChunks 1, isLast."""
    file_write(thread=thread, path="/small.bin", data=b"abc", mime_type="application/octet-stream")

    stream = file_read_stream(thread=thread, path="/small.bin")

    assert stream is not None
    assert list(stream) == [FileChunk(data=b"abc", index=0, total_chunks=1, is_last=True)]


def test_read_file_stream_yields_chunks_in_sequential_order(thread: Thread) -> None:
    """§8.8 Chunked Files / Ordering Guarantee: chunks 0, 1, 2… in order, each with
    totalChunks, only the final one isLast; together they are the file."""
    content = bytes(range(256)) * 40  # 10,240 bytes
    file_write(thread=thread, path="/big.bin", data=content, mime_type="application/octet-stream")

    stream = file_read_stream(thread=thread, path="/big.bin", chunk_size=4096)

    assert stream is not None
    chunks = list(stream)
    assert [(c.index, c.total_chunks, c.is_last, len(c.data)) for c in chunks] == [
        (0, 3, False, 4096), (1, 3, False, 4096), (2, 3, True, 2048),
    ]  # fmt: skip
    assert b"".join(c.data for c in chunks) == content


def test_read_file_stream_default_chunk_is_one_point_seven_five_mib(thread: Thread) -> None:
    """DIGEST §14: large files are chunked at 1.75 MB (1,835,008 bytes)."""
    file_write(thread=thread, path="/f.bin", data=b"x" * 1_835_009, mime_type="application/x")

    stream = file_read_stream(thread=thread, path="/f.bin")

    assert stream is not None
    assert [len(chunk.data) for chunk in stream] == [1_835_008, 1]


def test_read_file_stream_stops_yielding_once_aborted(thread: Thread) -> None:
    """§8.8 Abort Signal: when triggered, no new chunks; already-yielded ones stay valid."""
    file_write(thread=thread, path="/f.bin", data=b"a" * 10 + b"b" * 10 + b"c" * 10,
               mime_type="application/octet-stream")  # fmt: skip
    abort = threading.Event()
    stream = file_read_stream(thread=thread, path="/f.bin", chunk_size=10, abort=abort)
    assert stream is not None

    first = next(stream)
    abort.set()
    rest = list(stream)

    assert (first.data, first.index, first.is_last) == (b"a" * 10, 0, False)
    assert rest == []


def test_read_file_stream_is_null_for_missing_file(thread: Thread) -> None:
    """§8.8 File Not Found: returns null when the file does not exist."""
    assert file_read_stream(thread=thread, path="/nope.bin") is None


def test_stat_file_returns_metadata_or_null(thread: Thread) -> None:
    """§8.3: statFile returns the FileRecord without the content; null when absent."""
    file_write(thread=thread, path="/images/photo.png", data=_png(8, 6), mime_type="image/png")

    info = file_stat(thread=thread, path="/images/photo.png")

    assert info is not None
    assert (info.path, info.size, info.width, info.height) == (
        "/images/photo.png", len(_png(8, 6)), 8, 6,
    )  # fmt: skip
    assert file_stat(thread=thread, path="/images/other.png") is None


def test_readdir_lists_direct_children(thread: Thread) -> None:
    """§8.4: readdirFile lists a directory's entries, each saying whether it is a directory."""
    file_mkdir(thread=thread, path="/documents")
    file_write(thread=thread, path="/documents/a.txt", data=b"a", mime_type="text/plain")
    file_write(thread=thread, path="/documents/sub/b.txt", data=b"b", mime_type="text/plain")

    entries = file_readdir(thread=thread, path="/documents")

    assert [(e.name, e.is_directory) for e in entries] == [("a.txt", False), ("sub", True)]
    with pytest.raises(NotFound):
        file_readdir(thread=thread, path="/nowhere")


def test_unlink_deletes_the_file_and_its_bytes(
    thread: Thread, media: Path, django_capture_on_commit_callbacks: Any
) -> None:
    """§8.4: unlinkFile deletes a file (its stored bytes too, once the delete commits)."""
    record = file_write(thread=thread, path="/data/config.json", data=b"{}",
                        mime_type="application/json")  # fmt: skip
    stored = media / record.storage_key
    assert stored.read_bytes() == b"{}"

    with django_capture_on_commit_callbacks(execute=True):
        assert file_unlink(thread=thread, path="/data/config.json") is True

    assert file_stat(thread=thread, path="/data/config.json") is None
    assert not stored.exists()
    assert file_unlink(thread=thread, path="/data/config.json") is False


def test_mkdir_creates_a_directory_record(thread: Thread) -> None:
    """§8.4: mkdirFile creates a directory and returns its FileRecord (isDirectory)."""
    record = file_mkdir(thread=thread, path="/documents")

    assert (record.path, record.name, record.is_directory) == ("/documents", "documents", True)
    assert file_mkdir(thread=thread, path="/documents/").pk == record.pk


def test_rmdir_removes_only_empty_directories(thread: Thread) -> None:
    """§8.4 / DIGEST §14: rmdirFile removes an empty directory; a non-empty one stays."""
    file_mkdir(thread=thread, path="/empty")
    file_write(thread=thread, path="/full/x.txt", data=b"x", mime_type="text/plain")

    file_rmdir(thread=thread, path="/empty")
    with pytest.raises(Conflict, match=r"not empty \(1 entries\)"):
        file_rmdir(thread=thread, path="/full")

    assert file_stat(thread=thread, path="/empty") is None
    assert file_stat(thread=thread, path="/full") is not None


def test_get_file_stats_counts_files_directories_and_bytes(thread: Thread) -> None:
    """§8.6: getFileStats returns fileCount, directoryCount and totalSize."""
    file_write(thread=thread, path="/a/one.txt", data=b"12345", mime_type="text/plain")
    file_write(thread=thread, path="/a/b/two.txt", data=b"123", mime_type="text/plain")
    file_mkdir(thread=thread, path="/c")

    assert file_stats(thread=thread) == FileStats(file_count=2, directory_count=3, total_size=8)


def test_grep_searches_text_files_by_line(thread: Thread) -> None:
    """§8.5: grepFiles(pattern) returns, per file, the matching lines and their numbers;
    DIGEST §14: only text MIME types are searchable."""
    file_write(thread=thread, path="/logs/app.log", data=b"ok\nerror: disk\nok\nerror: net\n",
               mime_type="text/plain")  # fmt: skip
    file_write(thread=thread, path="/cfg.json", data=b'{"error": 1}', mime_type="application/json")
    file_write(thread=thread, path="/blob.bin", data=b"error", mime_type="application/octet-stream")

    assert file_grep(thread=thread, pattern="error") == [
        GrepResult(path="/cfg.json", matches=[GrepMatch(line=1, content='{"error": 1}')]),
        GrepResult(path="/logs/app.log", matches=[
            GrepMatch(line=2, content="error: disk"), GrepMatch(line=4, content="error: net"),
        ]),
    ]  # fmt: skip


def test_find_star_matches_within_one_segment(thread: Thread) -> None:
    """§8.5 / DIGEST §14: findFiles glob; ``*`` matches within a path segment."""
    for name in ["/a.json", "/b.txt", "/dir/c.json"]:
        file_write(thread=thread, path=name, data=b"{}", mime_type="application/json")

    assert file_find(thread=thread, pattern="/*.json") == ["/a.json"]


def test_find_double_star_matches_any_depth(thread: Thread) -> None:
    """§8.5: ``findFiles('**/*.json')`` finds JSON files at every depth."""
    for name in ["/a.json", "/b.txt", "/dir/c.json", "/dir/deep/d.json"]:
        file_write(thread=thread, path=name, data=b"{}", mime_type="application/json")

    assert file_find(thread=thread, pattern="**/*.json") == [
        "/a.json", "/dir/c.json", "/dir/deep/d.json",
    ]  # fmt: skip


def test_find_question_mark_matches_one_character(thread: Thread) -> None:
    """DIGEST §14: ``?`` matches exactly one character."""
    for name in ["/v1.txt", "/v10.txt", "/v2.txt"]:
        file_write(thread=thread, path=name, data=b"", mime_type="text/plain")

    assert file_find(thread=thread, pattern="/v?.txt") == ["/v1.txt", "/v2.txt"]


def test_find_pattern_without_leading_slash_matches_anywhere(thread: Thread) -> None:
    """DIGEST §14: patterns without a leading ``/`` match anywhere in the tree."""
    for name in ["/src/util.py", "/lib/src/util.py", "/util.py"]:
        file_write(thread=thread, path=name, data=b"", mime_type="text/x-python")

    assert file_find(thread=thread, pattern="src/util.py") == ["/lib/src/util.py", "/src/util.py"]
    assert file_find(thread=thread, pattern="/src/util.py") == ["/src/util.py"]


def test_thumbnail_of_an_image_and_null_otherwise(thread: Thread) -> None:
    """§8.7: getFileThumbnail returns a small image for an image file; null otherwise."""
    file_write(thread=thread, path="/images/photo.png", data=_png(1000, 500), mime_type="image/png")
    file_write(thread=thread, path="/notes.txt", data=b"hi", mime_type="text/plain")

    thumbnail = file_thumbnail(thread=thread, path="/images/photo.png")

    assert thumbnail is not None
    with Image.open(io.BytesIO(thumbnail)) as image:
        assert (image.format, image.size) == ("PNG", (256, 128))
    assert file_thumbnail(thread=thread, path="/notes.txt") is None
    assert file_thumbnail(thread=thread, path="/missing.png") is None


def test_paths_are_normalised(thread: Thread) -> None:
    """DIGEST §14: paths are normalised (leading /, no trailing /, collapsed slashes)."""
    record = file_write(thread=thread, path="docs//guide/", data=b"x", mime_type="text/plain")

    assert record.path == "/docs/guide"
    assert file_read(thread=thread, path="/docs/guide") == b"x"


def test_file_systems_are_isolated_per_thread(tenant: Tenant, thread: Thread) -> None:
    """§8: each thread has an isolated file system."""
    sibling = make_thread(tenant)
    file_write(thread=thread, path="/secret.txt", data=b"mine", mime_type="text/plain")

    assert file_read(thread=sibling, path="/secret.txt") is None
    assert file_find(thread=sibling, pattern="**") == []
