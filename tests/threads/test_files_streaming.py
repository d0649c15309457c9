"""A 200 MiB file goes up and comes back through a real uvicorn server (ASGI), PostgreSQL and
Django's storage without the server holding it in memory (peak RSS stays far below it)."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from config.launcher import background_server
from tenancy.models import Role, Tenant
from tests.factories import make_api_key
from tests.support import current_database_url
from tests.threads.conftest import make_thread
from threads.models import ThreadFile
from threads.services.files import file_delete_all

SIZE = 200 * 1024 * 1024
CHUNK = 1024 * 1024
MAX_PEAK_RSS = 150 * 1024 * 1024  # the whole server process, interpreter and Django included


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _server() -> contextlib.AbstractContextManager[tuple[int, int]]:
    """``(port, pid)`` of a uvicorn serving the project against the test database."""
    return background_server(
        {"DATABASE_URL": current_database_url(), "MEDIA_ROOT": str(settings.MEDIA_ROOT)}
    )


def _memory(pid: int, field: str) -> int:
    """``VmHWM`` (peak) or ``VmRSS`` of process ``pid``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def _content() -> Iterator[bytes]:
    """SIZE bytes in CHUNK pieces, each distinct (its index leads it)."""
    block = hashlib.sha256(b"seed").digest() * (CHUNK // 32)
    for index in range(SIZE // CHUNK):
        yield index.to_bytes(8, "big") + block[8:]


@pytest.mark.django_db(transaction=True)
def test_200_mib_upload_streams_to_storage_and_back_without_being_held_in_memory(
    tenant: Tenant,
) -> None:
    thread = make_thread(tenant)
    auth = {"Authorization": f"Bearer {make_api_key(tenant, role=Role.MEMBER).secret}"}
    url = f"/api/v1/threads/{thread.id}/fs/uploads/big.bin"
    sent = hashlib.sha256()
    try:
        with _server() as (port, pid):
            connection_ = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            connection_.request("GET", f"/api/v1/threads/{thread.id}/fs-stats", headers=auth)
            warm = connection_.getresponse()
            assert (warm.status, json.loads(warm.read())["file_count"]) == (200, 0)
            baseline = _memory(pid, "VmRSS")

            connection_.putrequest("PUT", url)
            for name, value in {**auth, "Content-Type": "application/octet-stream",
                                "Content-Length": str(SIZE)}.items():  # fmt: skip
                connection_.putheader(name, value)
            connection_.endheaders()
            for chunk in _content():
                sent.update(chunk)
                connection_.send(chunk)
            uploaded = connection_.getresponse()
            record = json.loads(uploaded.read())

            connection_.request("GET", url, headers=auth)
            download = connection_.getresponse()
            received, length = hashlib.sha256(), 0
            while chunk := download.read(CHUNK):
                received.update(chunk)
                length += len(chunk)
            peak = _memory(pid, "VmHWM")
            connection_.close()
        print(f"uvicorn RSS after warm-up {baseline / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB")

        assert (uploaded.status, record["size"], record["path"]) == (201, SIZE, "/uploads/big.bin")
        assert (download.status, download.getheader("Content-Length")) == (200, str(SIZE))
        assert (length, received.hexdigest()) == (SIZE, sent.hexdigest())
        row = ThreadFile.objects.get(thread=thread, path="/uploads/big.bin")
        stored = Path(settings.MEDIA_ROOT) / row.storage_key
        assert stored.stat().st_size == SIZE
        assert peak < MAX_PEAK_RSS
        assert peak - baseline < SIZE // 4
    finally:
        file_delete_all(thread=thread)
