"""Human actions end to end: a real Celery worker runs the turns, pauses them on an ``ask``
rule and resumes them after respond_action over the API (this process's client, whose
wake-ups reach the worker); PostgreSQL and Redis are real, a stored scripted model answers.

The worker registers a ``refund`` tool that asks above 100 and counts its runs in the
thread's KV (``refunds``), so "ran once" is read from the database, not from a process.
Data is committed (``transaction=True``) so the worker sees it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from rest_framework.test import APIClient

from agents.bundles import bundle_import
from agents.registry import tool, use_registry
from config.celery import app
from tenancy.models import Role, Tenant
from tests.replay.replays import assert_replays
from tests.support import current_database_url
from tests.worker import (
    Worker,
    log_on_failure,
    private_queue,
    tasks_routed_to,
    wait_until,
    worker_start,
)
from threads.models import Action, Message, Thread, Turn
from threads.services.actions import actions_expire
from threads.services.lock import lock_is_held
from threads.services.threads import thread_create
from threads.services.values import value_get

pytestmark = pytest.mark.django_db(transaction=True)

T = TypeVar("T")
Json = dict[str, Any]
TIMEOUT_S = 30.0
WAITING_TURNS = 50
# A code-mode program: three tool calls, the second gated by an ask rule.
PROGRAM = """
export default async function () {
  const one = await tools.step_one();
  const two = await tools.step_two();
  const three = await tools.step_three();
  return [one, two, three].join(", ");
}
"""


def tools_register() -> None:
    """In the worker: ``refund`` asks a person above 100 and counts its runs."""

    @tool(
        description="Refund an amount.",
        args={"type": "object", "properties": {"amount": {"type": "number"}},
              "required": ["amount"]},
        approval={"decision": "ask", "when": {">": [{"var": "amount"}, 100]}},
    )  # fmt: skip
    def refund(state: Any, args: dict[str, Any]) -> str:
        state.set_value("refunds", (state.get_value("refunds") or 0) + 1)
        return f"refunded {args['amount']}"

    def step(name: str, approval: str | None = None) -> None:
        def run(state: Any) -> str:
            count = (state.get_value(name) or 0) + 1
            state.set_value(name, count)
            return f"{name} #{count}"

        run.__name__ = name
        tool(description=f"The step {name}.", approval=approval)(run)

    step("step_one")
    step("step_two", approval="ask")
    step("step_three")


@pytest.fixture(scope="module")
def _worker(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    directory = tmp_path_factory.mktemp("actions")
    worker = worker_start(
        queue=private_queue(), database_url=current_database_url(),
        log_path=directory / "worker.log", concurrency=4,
        setup="tests.threads.test_actions_e2e:tools_register",
    )  # fmt: skip
    try:
        worker.wait_ready()
        with tasks_routed_to(worker.queue):
            yield worker
    finally:
        worker.stop()


@pytest.fixture
def worker(_worker: Worker, request: pytest.FixtureRequest) -> Iterator[Worker]:
    with log_on_failure(request, _worker) as running:
        yield running


@pytest.fixture
def api(tenant: Tenant, client_for: Callable[..., APIClient]) -> Iterator[APIClient]:
    """The tenant's member key; its agent ``clerk`` refunds whatever the user names (the
    worker's ``refund``, registered here too so the definitions validate)."""
    with use_registry():
        tools_register()
        _clerk_define(tenant)
        yield client_for(tenant, Role.MEMBER)


def _clerk_define(tenant: Tenant) -> None:
    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "models": [{"name": "m", "provider": "scripted", "model_id": "scripted", "config": {
                "rules": [
                    {"when": {"last_role": "tool"},
                     "respond": {"text": "Done: {last_tool_result}"}},
                    {"when": {"last_user_contains": "small"},
                     "respond": {"tool_calls": [{"name": "refund", "arguments": {"amount": 5}}]}},
                    {"respond": {"tool_calls": [{"name": "refund", "arguments": {"amount": 500}}]}},
                ]}}],
            "prompts": [{"name": "p", "tool_description": "The clerk", "prompt": "You refund.",
                         "model": "m", "include_chat": True, "tools": ["refund"]}],
            "agents": [{"name": "clerk", "side_a": {"prompt": "p"}}],
        },
    )  # fmt: skip
    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "models": [{"name": "c", "provider": "scripted", "model_id": "scripted", "config": {
                "rules": [
                    {"when": {"last_role": "tool"},
                     "respond": {"text": "Done: {last_tool_result}"}},
                    {"respond": {"tool_calls": [{"name": "code",
                                                 "arguments": {"source": PROGRAM}}]}},
                ]}}],
            "prompts": [{"name": "coder", "tool_description": "The coder", "model": "c",
                         "prompt": "You write programs.", "include_chat": True,
                         "code_mode": True, "tools": ["step_one", "step_two", "step_three"]}],
            "agents": [{"name": "coder", "side_a": {"prompt": "coder"}}],
        },
    )  # fmt: skip


def _until(probe: Callable[[], T | None], what: str, worker: Worker) -> T:
    return wait_until(probe, what=what, worker=worker, timeout=TIMEOUT_S)


def _submit(api: APIClient, thread: Thread, content: str = "refund please") -> str:
    response = api.post(
        f"/api/v1/threads/{thread.id}/turns", {"input": {"content": content}}, format="json"
    )
    assert response.status_code == 202, response.json()
    return str(response.json()["id"])


def _status(turn_id: str) -> str:
    return str(Turn.objects.values_list("status", flat=True).get(pk=turn_id))


def _paused(api: APIClient, tenant: Tenant, worker: Worker) -> tuple[Thread, str, Action]:
    thread = thread_create(tenant=tenant, agent_name="clerk")
    turn_id = _submit(api, thread)
    _until(lambda: _status(turn_id) == "waiting_permission", "the turn to pause", worker)
    return thread, turn_id, Action.objects.get(turn_id=turn_id)


def _respond(api: APIClient, thread: Thread, action: Action, **body: Any) -> Any:
    return api.post(f"/api/v1/threads/{thread.id}/actions/{action.pk}", body, format="json")


def _ended(turn_id: str, worker: Worker) -> str:
    def ended() -> str | None:
        status = _status(turn_id)
        return None if status in ("queued", "running", "waiting_permission") else status

    return _until(ended, "the turn to end", worker)


def _refunds(thread: Thread) -> Any:
    return value_get(thread=thread, key="refunds")


def _answer(thread: Thread) -> str | None:
    last = Message.objects.filter(thread=thread, role="assistant").order_by("-seq").first()
    return None if last is None else last.content


def test_approve_runs_the_tool_once_and_answering_twice_is_a_409(
    worker: Worker, tenant: Tenant, api: APIClient
) -> None:
    thread, turn_id, action = _paused(api, tenant, worker)
    before = _refunds(thread)

    approved = _respond(api, thread, action, decision="approve")
    ended = _ended(turn_id, worker)
    twice = _respond(api, thread, action, decision="deny")

    assert before is None  # nothing ran while it waited
    assert approved.status_code == 200, approved.json()
    assert ended == "completed"
    assert _refunds(thread) == 1
    assert _answer(thread) == "Done: refunded 500"
    assert twice.status_code == 409
    assert_replays(thread)


def test_a_call_below_the_threshold_runs_without_asking(
    worker: Worker, tenant: Tenant, api: APIClient
) -> None:
    thread = thread_create(tenant=tenant, agent_name="clerk")

    turn_id = _submit(api, thread, "a small refund")

    assert _ended(turn_id, worker) == "completed"
    assert _refunds(thread) == 1
    assert not Action.objects.filter(thread=thread).exists()


def test_deny_gives_the_model_the_reason(worker: Worker, tenant: Tenant, api: APIClient) -> None:
    thread, turn_id, action = _paused(api, tenant, worker)

    _respond(api, thread, action, decision="deny", reason="needs a manager")

    assert _ended(turn_id, worker) == "completed"
    assert _refunds(thread) is None
    assert _answer(thread) == (
        "Done: Failed to execute tool: Permission denied by a person: needs a manager"
    )
    assert_replays(thread)


def test_edit_runs_the_call_with_the_edited_arguments(
    worker: Worker, tenant: Tenant, api: APIClient
) -> None:
    thread, turn_id, action = _paused(api, tenant, worker)

    edited = _respond(api, thread, action, decision="edit", arguments={"amount": 90})

    assert edited.status_code == 200, edited.json()
    assert _ended(turn_id, worker) == "completed"
    assert (_refunds(thread), _answer(thread)) == (1, "Done: refunded 90")


def test_an_expired_action_ends_the_turn_timed_out(
    worker: Worker, tenant: Tenant, api: APIClient
) -> None:
    thread, turn_id, action = _paused(api, tenant, worker)
    Action.objects.filter(pk=action.pk).update(expires_at=0)

    assert actions_expire() == 1  # what beat's task runs
    ended = _ended(turn_id, worker)

    assert ended == "timed_out"
    assert _refunds(thread) is None
    thread.refresh_from_db()
    assert thread.status == "timed_out"


def test_a_stop_while_waiting_cancels_the_action_and_the_turn(
    worker: Worker, tenant: Tenant, api: APIClient
) -> None:
    thread, turn_id, action = _paused(api, tenant, worker)

    stopped = api.post(f"/api/v1/threads/{thread.id}/stop", {}, format="json")

    assert stopped.status_code == 200, stopped.json()
    assert _status(turn_id) == "cancelled"
    action.refresh_from_db()
    assert action.status == "cancelled"
    assert _respond(api, thread, action, decision="approve").status_code == 409
    assert _refunds(thread) is None
    assert_replays(thread)


def _busy(worker: Worker) -> int:
    """Tasks the worker is executing now (Celery's own count, asked of the worker)."""
    replies = app.control.inspect(timeout=2.0).active() or {}
    mine = [tasks for host, tasks in replies.items() if host.startswith(worker.queue)]
    assert mine, f"the worker did not answer the inspection ({sorted(replies)})"
    return sum(len(tasks) for tasks in mine)


def test_turns_waiting_for_a_person_hold_no_worker(
    worker: Worker, tenant: Tenant, api: APIClient
) -> None:
    threads = [thread_create(tenant=tenant, agent_name="clerk") for _ in range(WAITING_TURNS)]
    turns = [_submit(api, thread) for thread in threads]
    _until(
        lambda: Turn.objects.filter(pk__in=turns, status="waiting_permission").count()
        == WAITING_TURNS,
        "every turn to pause", worker,
    )  # fmt: skip

    busy = _busy(worker)
    held = [t.pk for t in threads if lock_is_held(tenant_id=tenant.pk, thread_id=t.pk)]
    for thread in threads:
        _respond(api, thread, Action.objects.get(thread=thread), decision="approve")
    _until(
        lambda: Turn.objects.filter(pk__in=turns, status="completed").count() == WAITING_TURNS,
        "every turn to complete", worker,
    )  # fmt: skip

    assert busy == 0
    assert held == []
    assert [_refunds(thread) for thread in threads] == [1] * WAITING_TURNS


def test_a_paused_program_survives_its_workers_kill_and_resumes_without_rerunning_a_call(
    tenant: Tenant, api: APIClient, tmp_path: Path
) -> None:
    """Its own workers: the one that paused the program is killed (-9) while it waits."""
    first = worker_start(
        queue=private_queue(), database_url=current_database_url(),
        log_path=tmp_path / "first.log", setup="tests.threads.test_actions_e2e:tools_register",
    )  # fmt: skip
    second: Worker | None = None
    try:
        first.wait_ready()
        thread = thread_create(tenant=tenant, agent_name="coder")
        with tasks_routed_to(first.queue):
            turn_id = _submit(api, thread, "run the steps")
            _until(lambda: _status(turn_id) == "waiting_permission", "the pause", first)
        paused = _counts(thread)

        first.kill()
        after_kill = (_status(turn_id), _counts(thread), _pending_count(thread))
        second = worker_start(
            queue=private_queue(), database_url=current_database_url(),
            log_path=tmp_path / "second.log",
            setup="tests.threads.test_actions_e2e:tools_register",
        )  # fmt: skip
        second.wait_ready()
        with tasks_routed_to(second.queue):
            action = Action.objects.get(thread=thread)
            assert _respond(api, thread, action, decision="approve").status_code == 200
            ended = _ended(turn_id, second)
    finally:
        first.stop()
        if second is not None:
            second.stop()

    assert paused == [1, None, None]
    assert after_kill == ("waiting_permission", [1, None, None], 1)
    assert ended == "completed"
    assert _counts(thread) == [1, 1, 1]  # step_one ran once: replayed, not run again
    assert _answer(thread) == "Done: step_one #1, step_two #1, step_three #1"
    assert_replays(thread)


def _counts(thread: Thread) -> list[Any]:
    return [value_get(thread=thread, key=name) for name in ("step_one", "step_two", "step_three")]


def _pending_count(thread: Thread) -> int:
    return Action.objects.filter(thread=thread, status="pending").count()
