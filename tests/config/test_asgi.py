"""The ASGI entry point (config.asgi): requests borrow their sync thread from a pool."""

from __future__ import annotations

import threading

import pytest
from asgiref.testing import ApplicationCommunicator

from config.asgi import PooledASGIHandler, _RequestThread


async def _get(handler: PooledASGIHandler, path: str) -> int:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": [(b"host", b"testserver")], "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
    }  # fmt: skip
    communicator = ApplicationCommunicator(handler, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(5)
    await communicator.receive_output(5)  # the body
    await communicator.wait(5)
    return int(start["status"])


@pytest.mark.asyncio
async def test_requests_one_after_another_reuse_one_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[str] = []
    real_start = threading.Thread.start

    def counting_start(self: threading.Thread) -> None:
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    handler = PooledASGIHandler()
    statuses = [await _get(handler, "/api/v1/me") for _ in range(10)]

    assert statuses == [401] * 10  # through the view, on a sync thread
    # Django's own handler starts two threads per request (one to run it, one to join it);
    # the event loop's default executor is the loop's own.
    assert [name for name in started if not name.startswith("asyncio")] == ["request_0"]


def test_a_request_thread_knows_whether_work_still_runs_on_it() -> None:
    thread = _RequestThread()
    release = threading.Event()
    try:
        future = thread.submit(release.wait, 5)
        assert thread.running == 1
        release.set()
        future.result(5)
        assert thread.running == 0
    finally:
        thread.shutdown()
