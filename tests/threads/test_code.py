"""Code in the sandbox from threads (threads.services.code and .code_endpoint): code tools and
their results, values as JSON, and ``POST /api/v1/threads/{id}/run-code`` (DIGEST §17)."""

from __future__ import annotations

import asyncio
import datetime
import json
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.test import AsyncClient
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from agents.documents import CodeToolDoc
from agents.providers.base import AbortSignal
from sandbox import UNDEFINED, JSMap, TypedArray
from tenancy.models import Role
from tests.factories import make_api_key
from tests.support import ContextThread, current_database_url
from threads.api import code as code_api
from threads.models import Log, Thread
from threads.services import code_endpoint as code_endpoint_service
from threads.services.code import code_pool, code_run, code_settle_async, code_tool_run, plain
from threads.services.code_endpoint import (
    RUN_CODE_LEASE,
    RunnerSlots,
    code_lease_acquire,
    code_slots,
)
from threads.services.leases import lease_count


def test_an_aborted_flow_terminates_its_running_code_tool() -> None:
    tool = CodeToolDoc(
        name="spin", description="Spins", source="export default () => { for (;;) {} }"
    )
    abort = AbortSignal()
    abort.set()

    result = code_tool_run(tool, {}, tenant_id=uuid.uuid4(), abort=abort, budget_s=30)

    assert result.status == "error"
    assert result.error == "terminated: TerminatedError: the flow was stopped"


def test_a_code_tool_returning_nothing_succeeds_empty_and_values_become_json() -> None:
    nothing = CodeToolDoc(name="quiet", description="Nothing", source="export default () => {}")
    mapped = CodeToolDoc(
        name="mapped", description="A Map",
        source="export default () => ({ counts: new Map([['a', 1]]), when: new Date(0) })",
    )  # fmt: skip

    assert code_tool_run(nothing, {}, tenant_id=uuid.uuid4()).result == ""
    assert json.loads(code_tool_run(mapped, {}, tenant_id=uuid.uuid4()).result or "") == {
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
    assert _leases(thread) == 0


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
    assert _leases(thread) == 0


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


# Limits: a tenant's share, this process's runners ------------------------------------------------


def _leases(thread: Thread) -> int:
    return lease_count(tenant_id=thread.tenant_id, name=RUN_CODE_LEASE)


def test_a_call_over_the_tenants_limit_is_a_429_naming_the_limit_with_retry_after(
    thread: Thread, member: APIClient, other_thread: Thread, client_for: Any
) -> None:
    running = code_lease_acquire(tenant_id=thread.tenant_id)  # a call of this tenant runs

    refused = _run(member, thread, {"source": "export default 1"})
    other = _run(client_for(other_thread.tenant, Role.MEMBER), other_thread,
                 {"source": "export default 2"})  # fmt: skip

    running.release()
    assert refused.status_code == 429
    assert refused["Retry-After"] == "14"  # the runner wait, the 10 s budget, the margin
    error = refused.json()["error"]
    assert error["code"] == "rate_limited"
    assert error["message"] == (
        "this tenant already has 1 run-code call running, the most "
        "RUN_CODE_TENANT_CONCURRENCY allows at once; retry after 14 s"
    )
    assert error["details"] == {"setting": "RUN_CODE_TENANT_CONCURRENCY", "limit": 1}
    assert not Log.objects.filter(thread=thread, kind="code").exists()
    assert (other.status_code, other.json()["result"]) == (200, 2)


def test_the_tenants_limit_is_a_setting(
    thread: Thread, member: APIClient, settings: Settings
) -> None:
    settings.RUN_CODE_TENANT_CONCURRENCY = 2
    running = code_lease_acquire(tenant_id=thread.tenant_id)

    second = _run(member, thread, {"source": "export default 1"})
    running.release()

    assert (second.status_code, second.json()["status"]) == (200, "success")


def test_a_call_whose_code_cannot_start_gives_its_lease_back(
    thread: Thread, member: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("no sandbox today")

    monkeypatch.setattr(code_endpoint_service, "code_run", broken)

    with pytest.raises(RuntimeError, match="no sandbox today"):
        _run(member, thread, {"source": "export default 1"})

    assert _leases(thread) == 0
    assert code_slots().free == code_slots().size


def test_a_call_that_finds_every_runner_busy_is_a_503_after_the_wait(
    thread: Thread, member: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = RunnerSlots(1)
    assert asyncio.run(busy.take(timeout=0))
    monkeypatch.setattr(code_endpoint_service, "code_slots", lambda: busy)
    started = time.monotonic()

    response = _run(member, thread, {"source": "export default 1"})

    assert 1 <= time.monotonic() - started < 3  # RUN_CODE_RUNNER_WAIT_S
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    error = response.json()["error"]
    assert error["code"] == "unavailable"
    assert error["message"] == (
        "all 1 sandbox runners of this web process (SANDBOX_POOL_SIZE) stayed busy for 1 s "
        "(RUN_CODE_RUNNER_WAIT_S); retry after 1 s"
    )
    assert _leases(thread) == 0
    assert not Log.objects.filter(thread=thread, kind="code").exists()


AsyncPost = Callable[[str], Coroutine[Any, Any, Any]]


@pytest.fixture
def async_run(thread: Thread) -> AsyncPost:
    """POST run-code through Django's ASGI handler, as a member of the thread's tenant."""
    key = make_api_key(thread.tenant, role=Role.MEMBER).secret
    client = AsyncClient()

    def post(source: str) -> Coroutine[Any, Any, Any]:
        return client.post(
            f"/api/v1/threads/{thread.id}/run-code", {"source": source},
            content_type="application/json", headers={"Authorization": f"Bearer {key}"},
        )  # fmt: skip

    return post


async def _code_logs(thread: Thread) -> list[dict[str, Any]]:
    """The thread's ``code`` log rows, read on a thread whose connection is closed after."""

    def read() -> list[dict[str, Any]]:
        try:
            return [log.data for log in Log.objects.filter(thread=thread, kind="code")]
        finally:
            connection.close()

    return await asyncio.to_thread(read)


def _database_sessions() -> int:
    """Sessions on the test database besides this one, counted outside Django."""
    with psycopg.connect(current_database_url()) as probe:
        row = probe.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_under_asgi_the_call_is_answered_and_logged_like_under_wsgi(
    thread: Thread, async_run: AsyncPost
) -> None:
    response = await async_run("console.log('hi'); export default 6 * 7")

    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["result"], len(body["logs"])) == ("success", 42, 1)
    (logged,) = await _code_logs(thread)
    assert (logged["status"], logged["logs"]) == ("success", 1)
    assert _leases(thread) == 0


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_while_its_code_runs_a_call_holds_no_database_connection(
    thread: Thread, async_run: AsyncPost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(code_api, "ENDPOINT_BUDGET_S", 1.5)
    slots = code_slots()
    before = await asyncio.to_thread(_database_sessions)
    call = asyncio.create_task(async_run("for (;;) {}"))
    await _until(lambda: slots.free == slots.size - 1)
    await asyncio.sleep(0.3)  # the checks are over, the code runs

    during = await asyncio.to_thread(_database_sessions)

    response = await call
    assert during == before
    assert response.json()["status"] == "terminated"


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_client_that_leaves_terminates_its_code_and_frees_its_lease_and_runner(
    thread: Thread, async_run: AsyncPost
) -> None:
    slots = code_slots()
    call = asyncio.create_task(async_run("for (;;) {}"))
    await _until(lambda: _leases(thread) == 1 and slots.free == slots.size - 1)
    await asyncio.sleep(0.2)  # the code is running

    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    await _until(lambda: _leases(thread) == 0 and slots.free == slots.size)
    await asyncio.to_thread(code_pool().wait_ready, 3)  # every runner idle: the loop was ended
    assert await _code_logs(thread) == []


@pytest.mark.asyncio
async def test_a_cancelled_waiter_terminates_the_execution() -> None:
    execution = code_run("for (;;) {}")
    waiter = asyncio.create_task(code_settle_async(execution, budget_s=30))
    await asyncio.sleep(0.1)

    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter

    outcome = execution.result(timeout=0)
    assert outcome.status == "terminated"
    assert outcome.error is not None
    assert outcome.error.message == "the request was cancelled"


@pytest.mark.asyncio
async def test_runner_slots_are_handed_to_waiters_first_come_first_served() -> None:
    slots = RunnerSlots(1)
    assert await slots.take(timeout=0)
    order: list[str] = []

    async def wait(name: str) -> None:
        assert await slots.take(timeout=5)
        order.append(name)

    first = asyncio.create_task(wait("first"))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(wait("second"))
    await asyncio.sleep(0.01)

    slots.release()
    await first
    slots.release()
    await second

    assert order == ["first", "second"]
    slots.release()
    assert slots.free == 1


@pytest.mark.asyncio
async def test_a_runner_slot_waiter_gives_up_after_its_timeout_and_leaves_the_queue() -> None:
    slots = RunnerSlots(1)
    assert await slots.take(timeout=0)
    started = time.monotonic()

    assert await slots.take(timeout=0.2) is False

    assert 0.2 <= time.monotonic() - started < 1
    slots.release()
    assert slots.free == 1  # nobody was left waiting for it


@pytest.mark.asyncio
async def test_a_cancelled_runner_slot_waiter_takes_none() -> None:
    slots = RunnerSlots(1)
    assert await slots.take(timeout=0)
    waiter = asyncio.create_task(slots.take(timeout=5))
    await asyncio.sleep(0.01)

    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter

    slots.release()
    assert slots.free == 1


def test_a_runner_slot_is_handed_to_a_waiter_on_another_event_loop() -> None:
    """WSGI runs each request's async view on a loop of its own, in its own thread."""
    slots = RunnerSlots(1)
    assert asyncio.run(slots.take(timeout=0))
    got: list[bool] = []
    waiter = ContextThread(target=lambda: got.append(asyncio.run(slots.take(timeout=5))))
    waiter.start()
    time.sleep(0.1)

    slots.release()
    waiter.join(timeout=5)

    assert got == [True]
    assert slots.free == 0


def test_the_code_pool_confines_its_runners_as_the_settings_say() -> None:
    pool = code_pool()
    pool.wait_ready()

    assert pool.cpu_limit_seconds == settings.SANDBOX_CPU_LIMIT_S
    assert pool.address_space_limit_mb == settings.SANDBOX_ADDRESS_SPACE_MB
