"""Code in the sandbox from threads (threads.services.code): code tools and their results,
values as JSON, and ``POST /api/v1/threads/{id}/run-code`` (DIGEST §17)."""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.documents import CodeToolDoc
from agents.providers.base import AbortSignal
from sandbox import UNDEFINED, JSMap, TypedArray
from tenancy.models import Role
from threads.api import code as code_api
from threads.models import Log, Thread
from threads.services.code import code_tool_run, plain


def test_an_aborted_flow_terminates_its_running_code_tool() -> None:
    tool = CodeToolDoc(
        name="spin", description="Spins", source="export default () => { for (;;) {} }"
    )
    abort = AbortSignal()
    abort.set()

    result = code_tool_run(tool, {}, abort=abort, budget_s=30)

    assert result.status == "error"
    assert result.error == "terminated: TerminatedError: the flow was stopped"


def test_a_code_tool_returning_nothing_succeeds_empty_and_values_become_json() -> None:
    nothing = CodeToolDoc(name="quiet", description="Nothing", source="export default () => {}")
    mapped = CodeToolDoc(
        name="mapped", description="A Map",
        source="export default () => ({ counts: new Map([['a', 1]]), when: new Date(0) })",
    )  # fmt: skip

    assert code_tool_run(nothing, {}).result == ""
    assert json.loads(code_tool_run(mapped, {}).result or "") == {
        "counts": [["a", 1]], "when": "1970-01-01T00:00:00+00:00",
    }  # fmt: skip


def test_plain_turns_sandbox_values_into_json() -> None:
    value = {
        "u": UNDEFINED, "nan": float("nan"), "m": JSMap({1: "one"}), "s": {3},
        "d": datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC), "b": b"\x00\xff",
        "f32": TypedArray("Float32Array", b"\x00\x00\x80\x3f"),
    }  # fmt: skip

    assert plain(value) == {
        "u": None, "nan": None, "m": [[1, "one"]], "s": [3],
        "d": "2026-01-02T00:00:00+00:00", "b": {"type": "Uint8Array", "base64": "AP8="},
        "f32": {"type": "Float32Array", "base64": "AACAPw=="},
    }  # fmt: skip


# POST /api/v1/threads/{id}/run-code -------------------------------------------------------------


def _run(client: APIClient, thread: Thread, body: dict[str, Any]) -> Any:
    return client.post(f"/api/v1/threads/{thread.id}/run-code", body, format="json")


def test_run_code_answers_the_result_with_logs_and_reports(
    thread: Thread, member: APIClient
) -> None:
    source = (
        "console.log('adding', 2, 3);\n"
        "report({ step: 1 });\n"
        "export default (a: number, b: number) => a + b;"
    )
    response = _run(
        member, thread, {"source": source, "options": {"execute": {"args": [2, 3]}, "report": True}}
    )

    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["result"], body["error"]) == ("success", 5, None)
    assert [(log["level"], log["args"]) for log in body["logs"]] == [("log", ["adding", 2, 3])]
    assert body["reports"] == [{"step": 1}]
    assert body["durationMs"] >= 0
    log = Log.objects.get(thread=thread, kind="code")
    assert (log.data["status"], log.data["logs"], log.data["reports"]) == ("success", 1, 1)


def test_run_code_error_carries_name_message_and_position(
    thread: Thread, member: APIClient
) -> None:
    body = _run(
        member,
        thread,
        {
            "source": "const x = 1;\nthrow new RangeError('too far');",
            "options": {"filename": "play.ts"},
        },
    ).json()

    assert body["status"] == "error"
    error = body["error"]
    assert (error["name"], error["message"], error["filename"], error["line"]) == (
        "RangeError", "too far", "play.ts", 2,
    )  # fmt: skip


def test_run_code_unknown_option_is_a_link_error_not_a_400(
    thread: Thread, member: APIClient
) -> None:
    body = _run(member, thread, {"source": "export default 1", "options": {"timeout": 5}}).json()

    assert body["status"] == "link_error"
    assert "unknown option 'timeout'" in body["error"]["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "source"),
        ({"source": "1", "options": []}, "options"),
        ({"source": "1", "options": {"report": "yes"}}, "options"),
    ],
)
def test_run_code_bad_body_is_a_400_naming_the_field(
    thread: Thread, member: APIClient, body: dict[str, Any], field: str
) -> None:
    response = _run(member, thread, body)

    assert response.status_code == 400
    assert response.json()["error"]["field"] == field


def test_run_code_past_the_endpoint_budget_is_terminated(
    thread: Thread, member: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(code_api, "ENDPOINT_BUDGET_S", 0.5)

    body = _run(member, thread, {"source": "while (true) {}"}).json()

    assert body["status"] == "terminated"
    assert body["error"]["message"] == "the code ran past its budget of 0.5 s"


def test_run_code_needs_the_member_role(thread: Thread, client_for: Any) -> None:
    reader = client_for(thread.tenant, Role.READ_ONLY)

    response = _run(reader, thread, {"source": "export default 1"})

    assert response.status_code == 403
    assert not Log.objects.filter(thread=thread, kind="code").exists()


@pytest.mark.parametrize(
    ("source", "name", "words"),
    [
        ('export default "\\uD800"', "EncodingError", "result is not valid Unicode"),
        ('export default {a: ["ok", "\\uDC00"]}', "EncodingError", "result.a[1] is not valid"),
        ("export default new Date(8.64e15)", "SerializationError", "outside the years 1-9999"),
        ("export default 10n ** 5000n", "SerializationError", "BigInt of 5001 digits"),
    ],
)
def test_results_python_or_json_cannot_carry_settle_as_clear_errors(
    thread: Thread, member: APIClient, source: str, name: str, words: str
) -> None:
    """Not a 500, not a hang until the budget: the call settles with an error saying why."""
    body = {"source": source, "options": {"language": "javascript"}}
    started = time.monotonic()

    response = _run(member, thread, body)

    assert time.monotonic() - started < 5
    assert response.status_code == 200
    answer = response.json()
    assert answer["status"] == "error"
    assert answer["error"]["name"] == name
    assert words in answer["error"]["message"]


def test_logs_with_a_lone_surrogate_are_sent_with_a_replacement_character(
    thread: Thread, member: APIClient
) -> None:
    source = 'console.log("x\\uD800y"); export default 1'

    response = _run(member, thread, {"source": source, "options": {"language": "javascript"}})

    assert response.status_code == 200
    assert response.json()["logs"][0]["args"] == ["x\ufffdy"]
