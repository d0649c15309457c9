"""Zero overshoot under concurrency, through real Celery workers (ARCHITECTURE §4 "Spend goes
through one door"): however many model calls of a tenant run at once, in however many
threads, child threads and subprompts, no budget's committed spend exceeds its limit, the
ledger and the counters agree to the micro-unit, and nothing stays reserved once the calls
have settled, not even after a worker holding reservations is killed.

The model is a stored scripted model with prices (USD per million tokens, that is
micro-units per token), so that a worker process can answer from its rules. Its usage is
``ceil(characters / 4)`` of what it is sent and of what it answers; a call's reservation
bounds the input from above by one token per UTF-8 byte plus 16 per message, and the output
by the model's ``max_output_tokens``, clamped to what the tightest budget leaves (at least
``USAGE_MIN_OUTPUT_TOKENS``). Caps are sized from those two rules.

One worker (``main``) runs what this process sends; a second, with a short lock TTL on a
queue of its own, holds reservations when it is killed. Data is committed
(``transaction=True``) so the workers see it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction
from django.db.models import Sum

from agents.bundles import bundle_import
from tenancy.models import Tenant
from tests.factories import make_tenant
from tests.support import current_database_url
from tests.worker import (
    Worker,
    log_on_failure,
    private_queue,
    tasks_routed_to,
    wait_until,
    worker_start,
)
from threads.models import TURN_TERMINAL, Log, Message, RunStatus, SubagentLink, Thread, Turn
from threads.runtime.engine.spend import MESSAGE_OVERHEAD_TOKENS
from threads.services.inbox import message_queue
from threads.services.threads import thread_create
from threads.tasks import sweep_threads
from usage.budget_settings import budget_update
from usage.models import Budget, BudgetCounter, LedgerEntry, Reservation

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

Json = dict[str, Any]

SETTLE_TIMEOUT_S = 45.0
KILL_TTL_MS = 2000  # the lock TTL of the worker that is killed
RELEASE_MARGIN_S = 1.5  # the beat's sweep (every 0.25 s here) and the takeover's pickup

# Prices in micro-units per token, and the most a call may answer.
INPUT_PRICE = 1
OUTPUT_PRICE = 4
MAX_OUTPUT = 64

SYSTEM = "You help."
QUESTION = "Please summarise the tea report. " + "tea " * 100
ANSWER = "The report says tea prices rose; demand is steady and supply is short this year."


# Definitions and sizes -----------------------------------------------------------------------


def _model(rules: Sequence[Json]) -> Json:
    return {"name": "m", "provider": "scripted", "model_id": "scripted",
            "config": {"rules": list(rules)}, "input_price": str(INPUT_PRICE),
            "output_price": str(OUTPUT_PRICE),
            "capabilities": {"max_output_tokens": MAX_OUTPUT}}  # fmt: skip


def _prompt(name: str, text: str, **fields: Any) -> Json:
    return {"name": name, "tool_description": f"The {name} prompt", "prompt": text, "model": "m",
            "include_chat": True, "include_past_tools": True, **fields}  # fmt: skip


def _define_chat(tenant: Tenant, rules: Sequence[Json], tools: Sequence[str] = ()) -> None:
    """Agent ``chat``: side A is prompt ``p`` (:data:`SYSTEM`) on the priced model ``m``."""
    bundle_import(
        tenant=tenant,
        document={"version": 1, "models": [_model(rules)],
                  "prompts": [_prompt("p", SYSTEM, tools=list(tools))],
                  "agents": [{"name": "chat", "side_a": {"prompt": "p"}}]},
    )  # fmt: skip


def _reserve_floor(*texts: str) -> int:
    """The least a call whose messages are ``texts`` reserves: its input's upper bound and
    the smallest answer a reservation is made for."""
    bound = sum(MESSAGE_OVERHEAD_TOKENS + len(text.encode()) for text in texts)
    return bound * INPUT_PRICE + settings.USAGE_MIN_OUTPUT_TOKENS * OUTPUT_PRICE


def _call_cost(sent: str, answered: str) -> int:
    """What the scripted model charges for one call (``ceil(chars / 4)`` each way)."""
    return math.ceil(len(sent) / 4) * INPUT_PRICE + math.ceil(len(answered) / 4) * OUTPUT_PRICE


def _budget(tenant: Tenant, **fields: Any) -> Budget:
    """A budget stored before the tenant's first call (a worker reads a tenant's budgets
    at most every ``BUDGETS_CACHE_S``)."""
    values: Json = {"name": "cap", "scope": "tenant", "window": "lifetime", "policy": "pause",
                    **fields}  # fmt: skip
    return Budget.objects.create(tenant=tenant, **values)


# Reading what the workers wrote ---------------------------------------------------------------


def _model_spend(tenant: Tenant, threads: Sequence[Thread] | None = None) -> tuple[int, int]:
    """(sum of cost_micros, rows) of the tenant's model ledger rows (of ``threads``)."""
    rows = LedgerEntry.objects.filter(tenant=tenant, kind="model")
    if threads is not None:
        rows = rows.filter(thread_id__in=[thread.pk for thread in threads])
    total = rows.aggregate(total=Sum("cost_micros"))["total"] or 0
    return total, rows.count()


def _nothing_reserved(tenant: Tenant) -> None:
    assert not Reservation.objects.filter(tenant=tenant).exists()
    held = BudgetCounter.objects.filter(tenant=tenant).values_list(
        "reserved_micros", "reserved_tokens"
    )
    assert set(held) <= {(0, 0)}, list(held)


def _settled_turns(threads: Sequence[Thread], worker: Worker) -> list[Turn]:
    """Each thread's newest turn once every one has completed or waits for a resource (a
    failed turn fails the test with its error)."""

    def probe() -> list[Turn] | None:
        turns = []
        for thread in threads:
            turn = Turn.objects.filter(thread=thread).order_by("-position").first()
            if turn is None:
                return None
            if turn.status in TURN_TERMINAL and turn.status != RunStatus.COMPLETED:
                raise AssertionError(f"turn of {thread.pk} is {turn.status}: {turn.error}")
            if turn.status not in (RunStatus.COMPLETED, RunStatus.WAITING_RESOURCE):
                return None
            turns.append(turn)
        return turns

    return wait_until(probe, what=f"{len(threads)} turns to settle", worker=worker,
                      timeout=SETTLE_TIMEOUT_S)  # fmt: skip


def _send_all(threads: Sequence[Thread], text: str) -> None:
    """One message to each thread, committed together: the flows start at once."""
    with transaction.atomic():
        for thread in threads:
            message_queue(thread=thread, role="user", content=text)


def _waiting_for_budget(turn: Turn, budget: Budget) -> bool:
    waiting = (turn.resume or {}).get("waiting") or {}
    return (
        turn.status == RunStatus.WAITING_RESOURCE
        and waiting.get("reason") == "budget"
        and waiting.get("budget_id") == str(budget.pk)
    )


def _successful_calls(threads: Sequence[Thread]) -> int:
    logs = Log.objects.filter(thread__in=list(threads), kind="llm")
    return sum(1 for data in logs.values_list("data", flat=True) if not data.get("error"))


# Workers --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def _workers(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Worker]]:
    """``main`` (concurrency 32), which this process sends its tasks to, and ``doomed``
    (lock TTL :data:`KILL_TTL_MS`, a queue of its own), started together."""
    directory = tmp_path_factory.mktemp("budget-workers")
    workers = {
        "main": worker_start(queue=private_queue(), database_url=current_database_url(),
                             log_path=directory / "main.log", concurrency=32),
        "doomed": worker_start(queue=private_queue(), database_url=current_database_url(),
                               log_path=directory / "doomed.log", lock_ttl_ms=KILL_TTL_MS),
    }  # fmt: skip
    try:
        for started in workers.values():
            started.wait_ready()
        with tasks_routed_to(workers["main"].queue):
            yield workers
    finally:
        for started in workers.values():
            started.stop()


@pytest.fixture
def worker(_workers: dict[str, Worker], request: pytest.FixtureRequest) -> Iterator[Worker]:
    with log_on_failure(request, _workers["main"]) as main:
        yield main


@pytest.fixture
def doomed(_workers: dict[str, Worker], request: pytest.FixtureRequest) -> Iterator[Worker]:
    with log_on_failure(request, _workers["doomed"]) as started:
        yield started


# 1. One tenant's cap, fifty turns at once -----------------------------------------------------

TURNS = 50
FITTING_CALLS = 10


def test_fifty_concurrent_turns_never_overshoot_a_tenant_cost_cap(worker: Worker) -> None:
    """The cap admits a call while the spent and the reserved leave room for its floor: after
    9 calls of full cost a 10th still fits, and once 10 have been spent the floor no longer
    does. So at least 10 turns complete (a pause means the spent alone left no room), the
    rest wait for the budget, and the spend stays under the cap."""
    tenant = make_tenant("budget-fifty")
    _define_chat(tenant, rules=[{"respond": {"text": ANSWER, "delay_ms": 200}}])
    full_call = _call_cost(SYSTEM + QUESTION, ANSWER)
    floor = _reserve_floor(SYSTEM, QUESTION)
    cap = _budget(tenant, limit_micros=(FITTING_CALLS - 1) * full_call + floor)
    threads = [thread_create(tenant=tenant, agent_name="chat") for _ in range(TURNS)]

    _send_all(threads, QUESTION)
    turns = _settled_turns(threads, worker)

    spent, calls = _model_spend(tenant)
    counter = BudgetCounter.objects.get(budget=cap)
    assert cap.limit_micros is not None
    print(f"{calls} of {TURNS} turns completed; spent {spent} of {cap.limit_micros} micros")
    assert spent == counter.spent_micros <= cap.limit_micros
    completed = [turn for turn in turns if turn.status == RunStatus.COMPLETED]
    paused = [turn for turn in turns if turn.status == RunStatus.WAITING_RESOURCE]
    assert all(_waiting_for_budget(turn, cap) for turn in paused), [t.resume for t in paused]
    assert len(completed) + len(paused) == TURNS
    assert FITTING_CALLS <= len(completed) < TURNS, (len(completed), spent, cap.limit_micros)
    # One call per completed turn; a paused turn called nothing.
    assert calls == len(completed) == _successful_calls(threads)
    assert counter.spent_tokens == sum(
        e.input_tokens + e.output_tokens
        for e in LedgerEntry.objects.filter(tenant=tenant, kind="model")
    )
    _nothing_reserved(tenant)


# 2. A cap per thread, tool loops --------------------------------------------------------------

LOOPING_THREADS = 10
THREAD_CAP_MICROS = 3_000


def test_every_looping_thread_stays_under_its_own_cap(worker: Worker) -> None:
    """Each thread's model calls ``count_words`` over and over (its context grows every
    step, and so does each reservation) until its own cap pauses it."""
    tenant = make_tenant("budget-loops")
    call = {"name": "count_words", "arguments": {"text": "one two three"}}
    _define_chat(
        tenant,
        rules=[{"when": {"last_tool": "count_words"},
                "respond": {"tool_calls": [call], "delay_ms": 30}},
               {"respond": {"tool_calls": [call], "delay_ms": 30}}],
        tools=["count_words"],
    )  # fmt: skip
    cap = _budget(tenant, scope="thread", subject="", limit_micros=THREAD_CAP_MICROS)
    threads = [thread_create(tenant=tenant, agent_name="chat") for _ in range(LOOPING_THREADS)]

    _send_all(threads, "Count words for ever.")
    turns = _settled_turns(threads, worker)

    for thread, turn in zip(threads, turns, strict=True):
        assert _waiting_for_budget(turn, cap), turn.resume
        assert (turn.resume or {})["waiting"]["subject"] == str(thread.pk)
        counter = BudgetCounter.objects.get(budget=cap, subject=str(thread.pk))
        spent, calls = _model_spend(tenant, [thread])
        assert spent == counter.spent_micros <= THREAD_CAP_MICROS
        assert calls >= 3, f"thread {thread.pk} looped only {calls} times"
        tool_rows = Message.objects.filter(thread=thread, role="tool", name="count_words")
        assert calls == tool_rows.count() == _successful_calls([thread])
    assert BudgetCounter.objects.filter(budget=cap).count() == LOOPING_THREADS
    _nothing_reserved(tenant)


# 3. Subagents and subprompts spend under their parent -----------------------------------------
#
# A code-mode program calls only function tools (docs/actions.md), so it makes no model call
# of its own to count: the model calls made inside a parent's turn are its subprompts'.

BOSS = "You are the boss."
WORKER = "You are the worker."
CHECKER = "You are the checker."
NOTES = "You take notes."
PARENT_CAP_MICROS = 4_000


def _define_boss(tenant: Tenant) -> None:
    """Agent ``boss``: every step it calls ``pair`` (a blocking subagent: a child thread whose
    worker and checker each make a model call) and ``notes`` (a subprompt: a model call of
    the parent's thread, under the calling step), for ever."""
    again = {"tool_calls": [
        {"name": "pair", "arguments": {"message": "Draft a line about tea."}},
        {"name": "notes", "arguments": {}},
    ]}  # fmt: skip
    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "models": [_model([
                {"when": {"system_contains": BOSS}, "respond": again},
                {"when": {"system_contains": WORKER}, "respond": {"text": "Tea is good."}},
                {"when": {"system_contains": CHECKER}, "respond": {"text": "Checked."}},
                {"when": {"system_contains": NOTES}, "respond": {"text": "Noted."}},
            ])],
            "prompts": [_prompt("boss", BOSS, tools=["pair", "notes"]),
                        _prompt("worker", WORKER), _prompt("checker", CHECKER),
                        _prompt("notes", NOTES, include_chat=False)],
            "agents": [
                {"name": "boss", "side_a": {"prompt": "boss"}},
                {"name": "pair", "type": "dual_ai", "expose_as_tool": True,
                 "tool_description": "A worker and a checker", "max_session_turns": 1,
                 "side_a": {"prompt": "worker"}, "side_b": {"prompt": "checker"}},
            ],
        },
    )  # fmt: skip


def test_children_and_subprompts_spend_against_the_parent_threads_cap(worker: Worker) -> None:
    tenant = make_tenant("budget-tree")
    _define_boss(tenant)
    parents = [thread_create(tenant=tenant, agent_name="boss") for _ in range(3)]
    caps = {
        parent.pk: _budget(tenant, name=f"cap-{n}", scope="thread", subject=str(parent.pk),
                           limit_micros=PARENT_CAP_MICROS)
        for n, parent in enumerate(parents)
    }  # fmt: skip

    _send_all(parents, "Get the team working.")
    turns = _settled_turns(parents, worker)

    for parent, turn in zip(parents, turns, strict=True):
        cap = caps[parent.pk]
        assert _waiting_for_budget(turn, cap), turn.resume
        children = list(Thread.objects.filter(parent=parent))
        assert len(children) >= 2, "the subagent was called several times"
        assert SubagentLink.objects.filter(thread=parent).count() == len(children)
        counter = BudgetCounter.objects.get(budget=cap, subject=str(parent.pk))
        own, own_calls = _model_spend(tenant, [parent])
        theirs, their_calls = _model_spend(tenant, children)
        notes = Log.objects.filter(thread=parent, kind="llm", data__prompt="notes")
        assert notes.count() >= 2  # the subprompt's calls, beside the boss's
        assert their_calls >= 4  # the workers' and the checkers'
        assert own + theirs == counter.spent_micros <= PARENT_CAP_MICROS
        assert own_calls == _successful_calls([parent])
        assert their_calls == _successful_calls(children)
    # The children's calls count on no other thread's counter than their parent's.
    assert BudgetCounter.objects.filter(tenant=tenant).count() == len(parents)
    _nothing_reserved(tenant)


FOREMAN = "You are the foreman."
CREWMAN = "You are a crewman."
CREW = 5
CREW_CAP_MICROS = 6_000


def _define_foreman(tenant: Tenant) -> None:
    """Agent ``foreman``: its one step starts :data:`CREW` non-blocking subagents ``crew``
    and ends; each crew member's thread then calls ``count_words`` for ever, all at once."""
    count = {"name": "count_words", "arguments": {"text": "one two three"}}
    start = {"name": "crew", "arguments": {"message": "Count words."}}
    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "models": [_model([
                {"when": {"system_contains": FOREMAN, "last_tool": "crew"},
                 "respond": {"text": "The crew is at work."}},
                {"when": {"system_contains": FOREMAN}, "respond": {"tool_calls": [start] * CREW}},
                {"when": {"system_contains": CREWMAN},
                 "respond": {"tool_calls": [count], "delay_ms": 20}},
                {"respond": {"text": "Checked."}},
            ])],
            "prompts": [_prompt("foreman", FOREMAN,
                                tools=[{"name": "crew", "blocking": False}]),
                        _prompt("crewman", CREWMAN, tools=["count_words"]),
                        _prompt("checker", CHECKER)],
            "agents": [
                {"name": "foreman", "side_a": {"prompt": "foreman"}},
                {"name": "crew", "type": "dual_ai", "expose_as_tool": True,
                 "tool_description": "A crewman", "max_session_turns": 1,
                 "side_a": {"prompt": "crewman"}, "side_b": {"prompt": "checker"}},
            ],
        },
    )  # fmt: skip


def test_concurrent_children_never_overshoot_their_parents_cap(worker: Worker) -> None:
    """The children run at once, each on its own thread and flow, and race for the one
    counter of their parent's budget."""
    tenant = make_tenant("budget-crew")
    _define_foreman(tenant)
    parent = thread_create(tenant=tenant, agent_name="foreman")
    cap = _budget(tenant, scope="thread", subject=str(parent.pk), limit_micros=CREW_CAP_MICROS)

    _send_all([parent], "Start the crew.")
    [turn] = _settled_turns([parent], worker)
    children = list(Thread.objects.filter(parent=parent))
    child_turns = _settled_turns(children, worker)

    assert turn.status == RunStatus.COMPLETED
    assert len(children) == CREW
    assert all(_waiting_for_budget(child_turn, cap) for child_turn in child_turns)
    counter = BudgetCounter.objects.get(budget=cap)
    own, _ = _model_spend(tenant, [parent])
    theirs, their_calls = _model_spend(tenant, children)
    assert own + theirs == counter.spent_micros <= CREW_CAP_MICROS
    assert their_calls == _successful_calls(children) >= 2 * CREW
    _nothing_reserved(tenant)


# 4. kill -9 of a worker holding reservations --------------------------------------------------

KILLED_TURNS = 4
SLOW_MS = 2500


def test_a_killed_workers_reservations_are_released_and_no_call_is_charged_twice(
    worker: Worker, doomed: Worker
) -> None:
    tenant = make_tenant("budget-kill")
    _define_chat(tenant, rules=[{"respond": {"text": ANSWER, "delay_ms": SLOW_MS}}])
    cap = _budget(tenant, limit_micros=1_000_000)
    threads = [thread_create(tenant=tenant, agent_name="chat") for _ in range(KILLED_TURNS)]
    with tasks_routed_to(doomed.queue):
        _send_all(threads, QUESTION)
    wait_until(
        lambda: Reservation.objects.filter(tenant=tenant).count() == KILLED_TURNS,
        what="every turn's reservation", worker=doomed, timeout=20,
    )  # fmt: skip

    doomed.kill()
    killed = time.monotonic()
    held = BudgetCounter.objects.get(budget=cap)
    dead = list(Reservation.objects.filter(tenant=tenant).values_list("pk", flat=True))
    # The flows taking the threads over reserve anew: only the dead flows' rows must go.
    _sweep_until(lambda: not Reservation.objects.filter(pk__in=dead).exists(), worker)
    released_after = time.monotonic() - killed
    turns = _settled_turns(threads, worker)
    print(f"the killed worker's reservations were released {released_after:.2f} s after it died")

    assert held.reserved_micros > 0
    assert held.spent_micros == 0
    assert released_after <= KILL_TTL_MS / 1000 + RELEASE_MARGIN_S, (
        f"released {released_after:.2f} s after the kill"
    )
    assert [turn.status for turn in turns] == [RunStatus.COMPLETED] * KILLED_TURNS
    answers = Message.objects.filter(thread__in=threads, role="assistant", status="completed")
    entries = LedgerEntry.objects.filter(tenant=tenant, kind="model")
    # One charge per answered call, keyed by the answer it paid for: the killed calls
    # committed nothing, and the retried ones once.
    assert sorted(entries.values_list("key", flat=True)) == sorted(
        f"model:{pk}" for pk in answers.values_list("pk", flat=True)
    )
    assert entries.count() == KILLED_TURNS == _successful_calls(threads)
    spent, _ = _model_spend(tenant)
    counter = BudgetCounter.objects.get(budget=cap)
    assert spent == counter.spent_micros
    assert Log.objects.filter(thread__in=threads, kind="incident").count() == KILLED_TURNS
    _nothing_reserved(tenant)


def _sweep_until(done: Callable[[], bool], worker: Worker) -> None:
    """Run the beat's sweep every 0.25 s (its wake-ups go to ``worker``) until ``done``."""
    deadline = time.monotonic() + 20
    while not done():
        assert time.monotonic() < deadline, f"still not done; worker log:\n{worker.log()}"
        sweep_threads()
        time.sleep(0.25)


# 5. A raised cap resumes the paused turns -----------------------------------------------------


def test_raising_the_cap_resumes_the_turns_it_paused(worker: Worker) -> None:
    """The change is made here, as the API's process makes it, moments after the worker
    that paused the turns read (and cached) the budgets: the change reaches it at once."""
    tenant = make_tenant("budget-raise")
    _define_chat(tenant, rules=[{"respond": {"text": ANSWER}}])
    cap = _budget(tenant, limit_micros=1)
    threads = [thread_create(tenant=tenant, agent_name="chat") for _ in range(3)]
    _send_all(threads, QUESTION)
    paused = _settled_turns(threads, worker)
    assert all(_waiting_for_budget(turn, cap) for turn in paused)

    budget_update(tenant=tenant, budget=cap, data={"limit_cost": "1"})

    def resumed() -> list[Turn] | None:
        turns = [Turn.objects.get(pk=turn.pk) for turn in paused]
        return turns if all(turn.status == RunStatus.COMPLETED for turn in turns) else None

    wait_until(resumed, what="the paused turns to complete", worker=worker, timeout=5)
    _nothing_reserved(tenant)
