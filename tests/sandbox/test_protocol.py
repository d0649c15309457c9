"""The runner speaks the message protocol: a runner process driven line by line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from sandbox import protocol
from sandbox.options import prepare


class RawRunner:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sandbox.runner"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def send(self, message: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(protocol.dumps(message))
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the runner closed its stdout"
        return protocol.loads(line)

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        return self.process.wait(timeout=10)


@pytest.fixture
def runner() -> Iterator[RawRunner]:
    raw = RawRunner()
    try:
        yield raw
    finally:
        if raw.process.poll() is None:
            raw.process.kill()
            raw.process.wait()


def execute(execution_id: str, source: str, options: Any = None) -> dict[str, Any]:
    return {"type": "execute", "id": execution_id, "payload": prepare(source, options).payload}


def test_ready_then_started_then_done(runner: RawRunner) -> None:
    ready = runner.receive()
    runner.send(execute("exec-1", "export default 'hi'"))

    assert (ready["type"], ready["pid"]) == ("ready", runner.process.pid)
    assert set(ready["confinement"]) == {"applied", "refused"}
    assert runner.receive() == {"type": "started", "id": "exec-1"}
    done = runner.receive()
    assert (done["type"], done["id"], done["status"], done["result"]) == (
        "done",
        "exec-1",
        "success",
        "hi",
    )
    assert done["logs"] == []
    assert done["durationMs"] > 0
    assert runner.close() == 0


def test_tool_calls_are_correlated_by_call_id(runner: RawRunner) -> None:
    runner.receive()
    source = "export default await Promise.all([twice(1), twice(2)]);"
    runner.send(execute("exec-2", source, {"globals": {"twice": lambda n: n * 2}}))
    assert runner.receive()["type"] == "started"

    calls = [runner.receive(), runner.receive()]
    assert [c["type"] for c in calls] == ["tool_call", "tool_call"]
    assert {c["id"] for c in calls} == {"exec-2"}
    assert calls[0]["callId"] != calls[1]["callId"]
    # Answer out of order, plus a stale answer for another execution that must be ignored.
    runner.send(
        {"type": "tool_result", "id": "old", "callId": calls[0]["callId"], "ok": True, "result": 99}
    )
    for call in reversed(calls):
        runner.send({"type": "tool_result", "id": "exec-2", "callId": call["callId"], "ok": True,
                     "result": call["input"][0] * 2})  # fmt: skip

    done = runner.receive()
    assert (done["status"], done["result"]) == ("success", [2, 4])


def test_a_failed_tool_result_rejects_in_the_guest(runner: RawRunner) -> None:
    runner.receive()
    source = "export default await f().catch((e) => `${e.name}: ${e.message}`);"
    runner.send(execute("exec-3", source, {"globals": {"f": lambda: None}}))
    runner.receive()
    call = runner.receive()
    runner.send({"type": "tool_result", "id": "exec-3", "callId": call["callId"], "ok": False,
                 "error": {"name": "Denied", "message": "no"}})  # fmt: skip

    assert runner.receive()["result"] == "Denied: no"


def test_cancel_ends_the_active_execution_and_the_runner_serves_the_next(runner: RawRunner) -> None:
    runner.receive()
    runner.send(execute("exec-4", "while (true) {}"))
    assert runner.receive()["type"] == "started"
    runner.send({"type": "cancel", "id": "exec-4"})

    done = runner.receive()
    assert (done["id"], done["status"]) == ("exec-4", "terminated")
    runner.send(execute("exec-5", "export default 5"))
    runner.receive()
    assert runner.receive()["result"] == 5


def test_only_json_crosses_the_boundary() -> None:
    line = protocol.dumps({"type": "started", "id": "x\u2028\ud800"})

    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert line.decode("ascii")  # lone surrogates are escaped, never raw bytes
    with pytest.raises(ValueError, match="JSON object"):
        protocol.loads(b"[1, 2]")


def test_a_line_nested_too_deeply_to_parse_is_a_value_error() -> None:
    line = b'{"type": "done", "result": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"

    with pytest.raises(ValueError, match="nested too deeply"):
        protocol.loads(line)
