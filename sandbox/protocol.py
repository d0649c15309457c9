"""The runner message protocol: one JSON object per line over the runner's stdin/stdout.

Dispatcher -> runner: ``execute`` (start one execution), ``tool_result`` (the answer to one
``tool_call``), ``cancel`` (stop the active execution). Runner -> dispatcher: ``ready`` (the
process is warm and confined, with what confinement applied; sent once after start-up),
``started``, ``tool_call`` and ``done``; ``done`` carries the call's wall time
(``durationMs``) and, from this runner, the CPU time the runner process spent on it
(``cpuMs``, optional: a dispatcher treats its absence as 0).
``id`` correlates every message of one execution; ``callId`` one host call inside it. Only
JSON crosses: guest values travel in the tagged form of ``sandbox.marshal``, host callables
stay on the host side and are named by id.
"""

from __future__ import annotations

import json
from typing import Any, Literal, NotRequired, TypedDict

Status = Literal["success", "error", "link_error", "memory", "terminated"]
STATUSES: tuple[Status, ...] = ("success", "error", "link_error", "memory", "terminated")


class ErrorInfo(TypedDict, total=False):
    name: str
    message: str
    stack: str
    line: int
    column: int
    filename: str
    specifier: str


class LogEntry(TypedDict):
    level: Literal["log", "info", "warn", "error", "debug"]
    args: list[Any]  # tagged nodes
    timestamp: float  # epoch milliseconds


class ExecutePayload(TypedDict):
    """What the runner needs, already validated and encoded by the host."""

    source: str
    language: Literal["typescript", "javascript"]
    filename: str
    fn: str
    args: list[Any]  # tagged nodes
    has_args: bool
    imports: dict[str, Any]  # specifier -> tagged ``object`` node
    globals: dict[str, Any]  # name -> tagged node
    modules: dict[str, str]  # normalized "./path" -> source
    report: bool
    memory_limit_bytes: int
    stack_limit_bytes: int
    max_log_entries: int
    max_log_bytes: int
    max_result_bytes: int
    max_host_call_bytes: int
    max_pending_host_calls: int
    max_value_depth: int


class Execute(TypedDict):
    type: Literal["execute"]
    id: str
    payload: ExecutePayload


class Cancel(TypedDict):
    type: Literal["cancel"]
    id: str
    reason: NotRequired[str]


class ToolResult(TypedDict):
    type: Literal["tool_result"]
    id: str
    callId: str
    ok: bool
    result: NotRequired[Any]  # tagged node when ok
    error: NotRequired[ErrorInfo]  # when not ok


class ConfinementReport(TypedDict):
    """What a runner applied to itself (``sandbox.confine``): name -> value, and what the
    platform refused: name -> reason."""

    applied: dict[str, Any]
    refused: dict[str, str]


class Ready(TypedDict):
    type: Literal["ready"]
    pid: int
    confinement: ConfinementReport


class Started(TypedDict):
    type: Literal["started"]
    id: str


class ToolCall(TypedDict):
    type: Literal["tool_call"]
    id: str
    callId: str
    target: str  # a host function id, or "report"
    input: list[Any]  # tagged nodes: the call's arguments


class Done(TypedDict):
    type: Literal["done"]
    id: str
    status: Status
    durationMs: float
    cpuMs: NotRequired[float]  # the runner process's CPU time for the call, milliseconds
    logs: list[LogEntry]
    result: NotRequired[Any]  # tagged node when status is success
    error: NotRequired[ErrorInfo]


REPORT_TARGET = "report"


def dumps(message: Any) -> bytes:
    """One protocol line. ``ensure_ascii`` keeps lone surrogates from guest strings legal."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


def loads(line: bytes) -> dict[str, Any]:
    """Parse one protocol line; raises ``ValueError`` for anything but a JSON object,
    including one nested too deeply for the json module."""
    try:
        message = json.loads(line)
    except RecursionError:
        raise ValueError("a protocol message is nested too deeply to parse") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ValueError("a protocol message is a JSON object with a string 'type'")
    return message
