"""Long threads: how one step's cost grows with the length of the thread it runs on.

The target: a step on a thread of 10,000 messages costs within 1.5x of a step on a thread
of 10, in the engine's CPU and in wall time, and runs the same number of SQL statements.

For each size in :data:`SIZES`, one thread is given that many stored top-level messages,
written straight to the table (``bulk_create``: a 10,000-message thread takes seconds, not
10,000 engine steps): user and assistant alternate, 200 to 400 characters each, and every
:data:`TOOL_TURN_EVERY`-th answer first calls a tool, whose stored result follows the call,
as the engine stores them. ``Thread.message_seq`` is set to the last ``seq``. Only messages
are written: a thread's turns, logs and events of the past are not, since the engine reads
those by key or from a counter, never by scanning the thread's history.

Then the threads take steps in rounds, one step of each size per round (so a drift of the
machine's speed falls on all sizes alike): :data:`WARMUP_STEPS` unmeasured, :data:`STEPS`
timed, :data:`STATEMENT_SAMPLE_STEPS` counted. A step is one user message
(``message_queue``) and one flow driven here (``thread_drive``, the engine alone, as in the
engine bench's in-process case) whose model is an in-process
:class:`~agents.providers.scripted.Script` answering 200 to 400 characters of text at once.
The first step's request is checked to carry the whole built history. Per step:

* the engine process's CPU (``time.process_time`` around ``thread_drive``): the table's
  p50 / p95 / p99 columns. A full garbage collection runs before each timed step, outside
  the measure, so that no step pays for the previous (longer) one's garbage; the collector's
  time within the step is noted (``gc_ms_p50``);
* its wall time (``wall_ms_p50``, ``wall_ms_p95``);
* the SQL statements, ``BEGIN`` and ``COMMIT`` included (``CaptureQueriesContext``, as the
  engine bench counts them), on the counted steps, whose capture would slow the timed ones;
* the context sent to the model: the UTF-8 bytes of every message text of the request the
  script received (``context_bytes_p50``) and its messages. The model is sent the whole
  history today, so this grows with the thread; it is reported, not held to the target.

The model's own work is inside the step too, and small: the script answers at once, but it
counts the request's usage (a pass over every message's text) as a provider reports it.

Each row's ``measured`` gives its CPU and wall p50 over those at 10 messages; the
10,000-message row gives the statements at every size and the verdict.
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from bench.harness import Row, bench_tenant, benchmark, cpu_calibration_ms, summarize

if TYPE_CHECKING:
    from agents.providers.base import ProviderRequest
    from agents.providers.scripted import Script
    from tenancy.models import Tenant
    from threads.models import Message, Thread
    from threads.runtime.engine import Runtime

SIZES = (10, 100, 1_000, 10_000)
STEPS = 20
WARMUP_STEPS = 3
STATEMENT_SAMPLE_STEPS = 5
TOOL_TURN_EVERY = 4  # every 4th answer calls a tool first: user, call, result, answer
TEXT_CHARS = (200, 400)
BUILD_BATCH = 2_000
TARGET_RATIO = 1.5
TARGET = "10,000 msgs: <= 1.5x the figure at 10, statements equal"
AGENT = "long"
TOOL = "order_lookup"

BUNDLE: dict[str, Any] = {
    "version": 1,
    "models": [
        {"name": "m", "provider": "scripted", "model_id": "scripted",
         "config": {"rules": [{"respond": {"text": "ok"}}]}},
    ],
    "prompts": [
        {"name": AGENT, "tool_description": "Answers customers", "model": "m",
         "prompt": "You are a support agent for an online shop. Answer in a few sentences.",
         "include_chat": True, "include_past_tools": True},
    ],
    "agents": [{"name": AGENT, "type": "ai_human", "side_a": {"prompt": AGENT}}],
}  # fmt: skip

FILLER = (
    "order delivery parcel refund invoice address customer account payment card shipping "
    "tracking number warehouse return label week yesterday morning price discount product "
    "size colour replacement the a of to and in for is on that with was it your my we "
    "please could would thanks help check update status arrived missing damaged box item "
    "store email phone support team today soon again already still before after because"
)
WORDS = FILLER.split()


class BenchError(RuntimeError):
    pass


# Building a long thread ------------------------------------------------------------------------


def _text(rng: random.Random) -> str:
    """Prose-like text of TEXT_CHARS characters (bounds included)."""
    size = rng.randint(*TEXT_CHARS)
    words: list[str] = []
    length = -1
    while length < size:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    text = " ".join(words)[:size].rstrip()
    return f"{text[0].upper()}{text[1:]}."


def _history(thread: Thread, count: int, rng: random.Random) -> list[Message]:
    """``count`` (even) top-level messages as the engine stores a finished ``ai_human``
    conversation: turns of a user message and an answer, every TOOL_TURN_EVERY-th answer
    preceded by a tool call and its result when the four rows still fit."""
    from common.time import now_us
    from threads.models import Message, MessageRole

    if count % 2:
        raise BenchError(f"a history of {count} messages would not end with an answer")
    started = now_us() - count * 1_000_000  # one message a second, ending now
    rows: list[Message] = []

    def add(role: str, side: str, content: str | None, **fields: Any) -> None:
        seq = len(rows) + 1
        at = started + seq * 1_000_000
        rows.append(
            Message(tenant_id=thread.tenant_id, thread=thread, seq=seq, role=role, side=side,
                    content=content, created_at=at, updated_at=at, **fields)
        )  # fmt: skip

    answer_meta = {"model": "m", "prompt": AGENT}
    turn = 0
    while len(rows) < count:
        turn += 1
        add(MessageRole.USER, "b", _text(rng))
        if turn % TOOL_TURN_EVERY == 0 and count - len(rows) >= 3:
            call_id = f"call_{len(rows) + 1}"
            arguments = f'{{"order": "{rng.randint(10_000, 99_999)}"}}'
            call = {"id": call_id, "type": "function",
                    "function": {"name": TOOL, "arguments": arguments}}  # fmt: skip
            add(MessageRole.ASSISTANT, "a", None, tool_calls=[call], metadata=answer_meta)
            add(MessageRole.TOOL, "a", _text(rng), name=TOOL, tool_call_id=call_id,
                tool_status="success")  # fmt: skip
        add(MessageRole.ASSISTANT, "a", _text(rng), metadata=answer_meta)
    return rows


def _build(tenant: Tenant, count: int) -> tuple[Thread, float]:
    """A thread of AGENT with ``count`` stored messages, at rest as after its last turn;
    and the seconds building it took."""
    from django.db import transaction

    from threads.models import Message, RunStatus, Thread
    from threads.runtime.lifecycle import thread_open

    started = time.perf_counter()
    thread = thread_open(tenant=tenant, agent_name=AGENT)
    rows = _history(thread, count, random.Random(count))  # noqa: S311 - filler text
    with transaction.atomic():
        Message.objects.bulk_create(rows, batch_size=BUILD_BATCH)
        Thread.objects.filter(pk=thread.pk).update(
            message_seq=rows[-1].seq, status=RunStatus.WAITING_INPUT,
            rest_status=RunStatus.WAITING_INPUT, last_activity_at=rows[-1].created_at,
            updated_at=rows[-1].created_at,
        )  # fmt: skip
    thread.refresh_from_db()
    return thread, time.perf_counter() - started


# Steps -----------------------------------------------------------------------------------------


@dataclass
class Size:
    """One thread of ``messages`` built messages, and what its measured steps cost."""

    messages: int
    thread: Thread
    build_s: float
    cpu_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    gc_s: list[float] = field(default_factory=list)
    context_bytes: list[int] = field(default_factory=list)
    context_messages: list[int] = field(default_factory=list)
    statements: list[int] = field(default_factory=list)


@dataclass
class ScriptedModel:
    """The in-process model every step calls, and the runtime that loads it."""

    script: Script
    runtime: Runtime
    rng: random.Random

    @classmethod
    def create(cls) -> ScriptedModel:
        from agents.providers.scripted import Script
        from threads.runtime.engine import Runtime

        script = Script()
        runtime = Runtime(load_model=lambda name: script.spec(name), retry_base_delay_s=0)
        return cls(script, runtime, random.Random(0))  # noqa: S311 - filler text

    def request(self, size: Size) -> ProviderRequest:
        """The one request the step made (forgotten here, so requests do not pile up)."""
        if len(self.script.requests) != 1:
            raise BenchError(
                f"{size.messages} messages: {len(self.script.requests)} model calls in a step, "
                "expected 1"
            )
        return self.script.requests.pop()


def _queue(size: Size, model: ScriptedModel) -> None:
    """The step's user message, and the model's answer to it."""
    from threads.services.inbox import message_queue

    model.script.text(_text(model.rng))
    message_queue(thread=size.thread, role="user", content=_text(model.rng), wake=False)


def _drive(size: Size, model: ScriptedModel) -> None:
    from threads.runtime.driver import thread_drive

    thread = size.thread
    if not thread_drive(
        thread_id=thread.pk, tenant_id=thread.tenant_id, runtime=model.runtime
    ).acquired:
        raise BenchError(f"thread {thread.pk}: someone else holds its lock")


@contextmanager
def _collecting() -> Iterator[list[float]]:
    """The seconds the garbage collector ran while inside (one cell)."""
    spent = [0.0]
    started = [0.0]

    def timed(phase: str, info: Mapping[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - started[0]

    gc.callbacks.append(timed)
    try:
        yield spent
    finally:
        gc.callbacks.remove(timed)


def _warm_step(size: Size, model: ScriptedModel) -> None:
    _queue(size, model)
    _drive(size, model)
    size.context_messages.append(len(model.request(size).messages))


def _timed_step(size: Size, model: ScriptedModel) -> None:
    """A step whose CPU, wall time, collector time and context are kept. A full collection
    first, outside the measure: the sizes alternate, and a step would otherwise pay for
    garbage the previous (longer) one left."""
    _queue(size, model)
    gc.collect()
    with _collecting() as collected:
        cpu, wall = time.process_time(), time.perf_counter()
        _drive(size, model)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    request = model.request(size)
    size.cpu_s.append(cpu)
    size.wall_s.append(wall)
    size.gc_s.append(collected[0])
    size.context_bytes.append(sum(len(message.text.encode()) for message in request.messages))
    size.context_messages.append(len(request.messages))


def _counted_step(size: Size, model: ScriptedModel) -> None:
    """A step whose statements are counted (the capture slows it: it is not timed)."""
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    _queue(size, model)
    reset_queries()  # a full log (DEBUG) would hide new entries from the capture
    with CaptureQueriesContext(connection) as captured:
        _drive(size, model)
    model.request(size)
    size.statements.append(len(captured.captured_queries))


def _checked_history(size: Size) -> None:
    """The first model call saw the whole built history: the system prompt, every built
    message, the new one (no tool call or result was dropped as unpaired)."""
    sent, expected = size.context_messages[0], size.messages + 2
    if sent != expected:
        raise BenchError(
            f"{size.messages} messages: the first call sent {sent} messages, expected "
            f"{expected} (the system prompt, the history, the new message)"
        )
    size.context_messages.clear()


def _checked_answers(size: Size) -> None:
    """Every step's turn completed and stored its two messages, in ``message_seq`` order."""
    from threads.models import Message, RunStatus, Thread, Turn

    expected = size.messages + 2 * (WARMUP_STEPS + STEPS + STATEMENT_SAMPLE_STEPS)
    thread = Thread.objects.get(pk=size.thread.pk)
    stored = Message.objects.filter(thread=thread).count()
    statuses = set(Turn.objects.filter(thread=thread).values_list("status", flat=True))
    if statuses != {RunStatus.COMPLETED} or stored != expected:
        raise BenchError(
            f"{size.messages} messages: turns ended {sorted(statuses)}, {stored} messages "
            f"stored (expected {expected})"
        )
    if thread.message_seq != stored:
        raise BenchError(f"{size.messages} messages: message_seq {thread.message_seq} != {stored}")


def _run_steps(sizes: Sequence[Size]) -> None:
    """Rounds of one step on each size: WARMUP_STEPS unmeasured, STEPS timed, then
    STATEMENT_SAMPLE_STEPS counted."""
    model = ScriptedModel.create()
    for run, rounds in ((_warm_step, WARMUP_STEPS), (_timed_step, STEPS),
                        (_counted_step, STATEMENT_SAMPLE_STEPS)):  # fmt: skip
        for _ in range(rounds):
            for size in sizes:
                run(size, model)
        if run is _warm_step:
            for size in sizes:
                _checked_history(size)
    for size in sizes:
        _checked_answers(size)


# The rows --------------------------------------------------------------------------------------


def _ratios(size: Size, base: Size) -> tuple[float, float]:
    """(CPU, wall) p50 of ``size`` over those of ``base``."""
    cpu = statistics.median(size.cpu_s) / statistics.median(base.cpu_s)
    return cpu, statistics.median(size.wall_s) / statistics.median(base.wall_s)


def _fewest_statements(size: Size) -> int:
    """The step's statements. The fewest of the counted steps: a step that outlasts the
    tenant's cached webhook subscriptions (``WEBHOOK_CACHE_S``) reads them again, a
    statement that comes with time, not with the thread's length."""
    return min(size.statements)


def _kilobytes(size: Size) -> str:
    return f"{statistics.median(size.context_bytes) / 1000:,.0f} kB"


def _size_row(size: Size, base: Size) -> Row:
    wall_p50 = statistics.median(size.wall_s) * 1000
    cpu_ratio, wall_ratio = _ratios(size, base)
    row = summarize(
        "long_threads", f"engine CPU per step, {size.messages:,} messages", size.cpu_s,
        sum(size.wall_s), TARGET, wall_ms_p50=round(wall_p50, 3),
        wall_ms_p95=round(statistics.quantiles(size.wall_s, n=20)[18] * 1000, 3),
        gc_ms_p50=round(statistics.median(size.gc_s) * 1000, 3),
        cpu_p50_ratio_to_10=round(cpu_ratio, 3), wall_p50_ratio_to_10=round(wall_ratio, 3),
        db_statements_per_step=_fewest_statements(size),
        db_statements_counted=list(size.statements),
        context_bytes_p50=statistics.median(size.context_bytes),
        context_messages_p50=statistics.median(size.context_messages),
        build_s=round(size.build_s, 3),
    )  # fmt: skip
    if size is base:
        text = f"baseline; wall p50 {wall_p50:.1f} ms"
    else:
        text = f"CPU {cpu_ratio:.2f}x, wall {wall_ratio:.2f}x of 10"
    statements = _fewest_statements(size)
    return replace(row, measured=f"{text}; {statements} stmts; context {_kilobytes(size)}")


def _rows(sizes: Sequence[Size]) -> list[Row]:
    """One row per size; the longest one's ``measured`` is the verdict."""
    base, longest = sizes[0], sizes[-1]
    rows = [_size_row(size, base) for size in sizes]
    cpu_ratio, wall_ratio = _ratios(longest, base)
    counts = [_fewest_statements(size) for size in sizes]
    met = cpu_ratio <= TARGET_RATIO and wall_ratio <= TARGET_RATIO and len(set(counts)) == 1
    verdict = (
        f"CPU {cpu_ratio:.2f}x, wall {wall_ratio:.2f}x of 10; "
        f"stmts {'/'.join(map(str, counts))}; context {_kilobytes(longest)} "
        f"({'met' if met else 'MISSED'})"
    )
    rows[-1] = replace(rows[-1], measured=verdict)
    return rows


def _run(tenant: Tenant) -> list[Row]:
    from agents.bundles import bundle_import

    bundle_import(tenant=tenant, document=BUNDLE)
    load, calibration = os.getloadavg()[0], cpu_calibration_ms()
    sizes = [Size(count, *_build(tenant, count)) for count in SIZES]
    _run_steps(sizes)
    shared = {"steps": STEPS, "warmup_steps": WARMUP_STEPS,
              "statement_sample_steps": STATEMENT_SAMPLE_STEPS, "load_avg_1m_at_start": load,
              "cpu_calibration_ms_at_start": calibration,
              "cpu_calibration_ms_at_end": cpu_calibration_ms()}  # fmt: skip
    return [replace(row, notes={**row.notes, **shared}) for row in _rows(sizes)]


@benchmark("long_threads")
def long_threads() -> Sequence[Row]:
    with bench_tenant("bench-long-threads") as tenant:
        return _run(tenant)
