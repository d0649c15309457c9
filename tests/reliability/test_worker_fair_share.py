"""No tenant starves another on the workers, through a real worker.

Tenant A keeps 30 turns in flight whose code tool loops until its budget ends; the worker's
pool has 5 database connections, far fewer than A's flows. Meanwhile tenant B's plain turns
start within a second (p99) and B's code-tool turns all succeed: A's flows hold no database
connection while they wait (for the sandbox, for their turn at it), and A runs
``SANDBOX_TENANT_CONCURRENCY`` (1) code calls at once, so one of the worker's two runners
stays B's. Nothing is taken for an outage: no ``PoolTimeout``, no drive cut short, and no
takeover incident on a flow that is still running.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.bundles import bundle_import
from tenancy.models import Tenant
from tests.factories import make_api_key, make_tenant
from tests.reliability.platform import Platform, PrivateRedis, chat_bundle, platform_processes
from threads.models import TURN_TERMINAL, Log, Message, MessageRole, RunStatus, Thread, Turn
from threads.services.leases import lease_key
from threads.services.threads import thread_create

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

A_TURNS = 30
B_PLAIN_TURNS = 20
B_CODE_TURNS = 3
P99_LIMIT_S = 1.0
CODE_TURN_LIMIT_S = 2.0  # A's loops run for 3 s each: B never waits behind one


@pytest.fixture
def platform(
    django_db_setup: None, redis_server: PrivateRedis, tmp_path: Path
) -> Iterator[Platform]:
    """One worker with room for every flow but only 5 database connections, and a code budget
    of 3 s so that A's loops end (and others of A's start) while the test runs."""
    environment = {"DB_POOL_SIZE": "5", "CODE_TOOL_TIMEOUT_S": "3"}
    with platform_processes(tmp_path, redis_server, concurrency=64,
                            environment=environment) as started:  # fmt: skip
        yield started


def _define(tenant: Tenant, name: str, source: str) -> None:
    document = chat_bundle(
        [
            {"when": {"last_tool": name}, "respond": {"text": "result: {last_tool_result}"}},
            {"when": {"last_user_contains": "code"},
             "respond": {"tool_calls": [{"name": name, "arguments": {}}]}},
            {"respond": {"text": "ok: {last_user_message}"}},
        ],
        tools=[name],
    )  # fmt: skip
    document["code_tools"] = [{"name": name, "description": f"The {name} tool",
                               "args_schema": {"type": "object", "properties": {}},
                               "language": "typescript", "source": source}]  # fmt: skip
    bundle_import(tenant=tenant, document=document)


def _post(platform: Platform, key: str, thread: Thread, text: str) -> float:
    """Post ``text`` to ``thread``; returns when it was accepted (``time.time()``)."""
    status, _, body = platform.request(
        "POST", f"/api/v1/threads/{thread.pk}/messages", key=key, body={"content": text}
    )
    assert status == 202, body
    return time.time()


def _turn(thread: Thread, timeout_s: float = 30.0) -> Turn:
    """The thread's newest turn once it has ended."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        turn = Turn.objects.filter(thread=thread).order_by("-position").first()
        if turn is not None and turn.status in TURN_TERMINAL:
            return turn
        time.sleep(0.05)
    raise AssertionError(f"the turn of thread {thread.pk} did not end within {timeout_s} s")


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) * 0.99) - 1)]


def test_a_tenants_looping_code_tools_do_not_starve_another_tenant(platform: Platform) -> None:
    noisy, quiet = make_tenant("noisy"), make_tenant("quiet")
    _define(noisy, "loop", "export default () => { for (;;) {} }")
    _define(quiet, "answer", "export default () => 6 * 7")
    noisy_key, quiet_key = make_api_key(noisy).secret, make_api_key(quiet).secret
    looping = [thread_create(tenant=noisy, agent_name="chat") for _ in range(A_TURNS)]
    for thread in looping:
        _post(platform, noisy_key, thread, "run the code")
    deadline = time.monotonic() + 20
    sandbox_leases = platform.redis.client()  # the platform's Redis, not this process's
    while not sandbox_leases.zcard(lease_key(tenant_id=noisy.pk, name="sandbox")) or (
        Turn.objects.filter(thread__tenant=noisy, status=RunStatus.RUNNING).count() < A_TURNS
    ):
        assert time.monotonic() < deadline, "tenant A's turns did not all start"
        time.sleep(0.1)

    started_after: list[float] = []
    for index in range(B_PLAIN_TURNS):
        thread = thread_create(tenant=quiet, agent_name="chat")
        accepted = _post(platform, quiet_key, thread, f"hello {index}")
        turn = _turn(thread)
        assert turn.status == RunStatus.COMPLETED, turn.error
        assert turn.started_at is not None
        started_after.append(max(0.0, turn.started_at / 1e6 - accepted))
    code_threads = [thread_create(tenant=quiet, agent_name="chat") for _ in range(B_CODE_TURNS)]
    code_took: list[float] = []
    for thread in code_threads:
        accepted = _post(platform, quiet_key, thread, "run the code")
        turn = _turn(thread)
        assert turn.status == RunStatus.COMPLETED, turn.error
        assert turn.ended_at is not None
        code_took.append(turn.ended_at / 1e6 - accepted)
    answers = [
        Message.objects.filter(thread=thread, role=MessageRole.TOOL)
        .values_list("content", flat=True)
        .first()
        for thread in code_threads
    ]
    still_looping = Turn.objects.filter(thread__tenant=noisy, status=RunStatus.RUNNING).count()

    assert _p99(started_after) < P99_LIMIT_S, sorted(started_after)
    assert answers == ["42"] * B_CODE_TURNS
    assert max(code_took) < CODE_TURN_LIMIT_S, code_took  # a runner was free for B at once
    assert still_looping > 0  # A was still busy all along
    assert not Log.objects.filter(kind="incident").exists()
    worker_log = platform.worker.log()
    for noise in ("PoolTimeout", "cut short by an outage", "taking over"):
        assert noise not in worker_log, noise
