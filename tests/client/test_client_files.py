"""The client's file system calls against a live server: uploads from bytes, a path or an
open file (with metadata), downloads whole, by range and to a file, listings across
pages, stat, mkdir, delete, stats, grep and find."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image
from standard_agents_client import (
    AsyncClient,
    Client,
    Conflict,
    NotFound,
    RangeNotSatisfiable,
    ValidationError,
)


def test_files_are_uploaded_downloaded_and_deleted(
    client: Client, chat: str, tmp_path: Path
) -> None:
    thread_id = client.threads.create(chat)["id"]
    local = tmp_path / "report.txt"
    local.write_bytes(b"line one\nline two\n")

    written = client.files.upload(thread_id, "/docs/a.txt", b"hello world")
    from_path = client.files.upload(thread_id, "/docs/report.txt", local)
    from_file = client.files.upload(
        thread_id, "/docs/b.bin", io.BytesIO(b"\x00\x01\x02"), mime_type="application/x-test"
    )
    with_metadata = client.files.upload(thread_id, "/docs/m.json", b"{}", metadata={"tag": "x"})
    replaced = client.files.upload(thread_id, "/docs/a.txt", b"hello again")

    assert (written["path"], written["size"], written["mime_type"]) == (
        "/docs/a.txt", 11, "text/plain"
    )  # fmt: skip
    assert from_path["size"] == 18
    assert from_file["mime_type"] == "application/x-test"
    assert with_metadata["metadata"] == {"tag": "x"}
    assert replaced["created_at"] == written["created_at"]
    assert client.files.download(thread_id, "/docs/a.txt") == b"hello again"
    assert client.files.download(thread_id, "/docs/a.txt", range=(6, None)) == b"again"
    assert client.files.download(thread_id, "/docs/a.txt", range=(0, 4)) == b"hello"
    with pytest.raises(RangeNotSatisfiable):
        client.files.download(thread_id, "/docs/a.txt", range=(100, None))
    target = tmp_path / "copy.txt"
    assert client.files.download_to(thread_id, "/docs/report.txt", target) == 18
    assert target.read_bytes() == local.read_bytes()

    client.files.delete(thread_id, "/docs/b.bin")
    with pytest.raises(NotFound):
        client.files.stat(thread_id, "/docs/b.bin")
    with pytest.raises(ValidationError) as bad_path:
        client.files.stat(thread_id, "/docs/../etc")
    assert bad_path.value.field == "path"


def test_directories_are_listed_across_pages_and_searched(client: Client, chat: str) -> None:
    thread_id = client.threads.create(chat)["id"]
    for name in ("a", "b", "c"):
        client.files.upload(
            thread_id, f"/notes/{name}.txt", f"# {name}\nneedle in {name}\n".encode()
        )
    made = client.files.mkdir(thread_id, "/notes/sub")
    client.files.upload(thread_id, "/other.txt", b"no match here")

    first = client.files.list(thread_id, "/notes", limit=2)
    walked = [entry["path"] for entry in client.files.iter(thread_id, "/notes", limit=2)]
    root = client.files.list(thread_id)
    stats = client.files.stats(thread_id)
    grepped = client.files.grep(thread_id, "needle", path="/notes")
    found = client.files.find(thread_id, "/notes/*.txt", type="file")

    assert made["is_directory"] is True
    assert len(first.results) == 2
    assert first.next is not None
    assert walked == ["/notes/a.txt", "/notes/b.txt", "/notes/c.txt", "/notes/sub"]
    assert {entry["path"] for entry in root} == {"/notes", "/other.txt"}
    assert stats == {"file_count": 4, "directory_count": 2, "total_size": stats["total_size"]}
    assert [hit["path"] for hit in grepped] == ["/notes/a.txt", "/notes/b.txt", "/notes/c.txt"]
    assert grepped.results[0]["matches"] == [{"line": 2, "content": "needle in a"}]
    assert [hit["path"] for hit in found] == ["/notes/a.txt", "/notes/b.txt", "/notes/c.txt"]
    with pytest.raises(Conflict):
        client.files.delete(thread_id, "/notes")


def test_an_image_has_a_thumbnail(client: Client, chat: str) -> None:
    thread_id = client.threads.create(chat)["id"]
    picture = io.BytesIO()
    Image.new("RGB", (600, 300), "navy").save(picture, format="PNG")
    stored = client.files.upload(thread_id, "/p.png", picture.getvalue(), mime_type="image/png")

    thumbnail = client.files.thumbnail(thread_id, "/p.png", size=100)

    assert (stored["width"], stored["height"]) == (600, 300)
    with Image.open(io.BytesIO(thumbnail)) as image:
        assert image.size == (100, 50)
    with pytest.raises(NotFound):
        client.files.thumbnail(thread_id, "/missing.png")


@pytest.mark.asyncio
async def test_the_async_client_uploads_from_a_path_and_downloads(
    aclient: AsyncClient, chat: str, tmp_path: Path
) -> None:
    thread_id = (await aclient.threads.create(chat))["id"]
    local = tmp_path / "big.bin"
    local.write_bytes(bytes(range(256)) * 4096)  # 1 MiB, sent in chunks

    uploaded = await aclient.files.upload(thread_id, "/big.bin", local)
    with_metadata = await aclient.files.upload(thread_id, "/m.bin", local, metadata={"k": 1})
    target = tmp_path / "back.bin"
    written = await aclient.files.download_to(thread_id, "/big.bin", target)
    part = await aclient.files.download(thread_id, "/big.bin", range=(256, 511))
    listed = [entry["path"] async for entry in aclient.files.iter(thread_id, limit=1)]

    assert uploaded["size"] == written == 1024 * 1024
    assert with_metadata["metadata"] == {"k": 1}
    assert target.read_bytes() == local.read_bytes()
    assert part == bytes(range(256))
    assert listed == ["/big.bin", "/m.bin"]
