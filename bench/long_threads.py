"""Long threads: how one step's cost grows with the length of the thread it runs on.

The target: a step on a thread of 10,000 messages costs within 1.5x of a step on a thread
of 10, in the engine's CPU and in wall time, and runs the same number of SQL statements.

The product is measured as configured for long threads: the prompt compacts its context
(:mod:`compaction`) with a window of :data:`CONTEXT_WINDOW` tokens, the default triggers
(before a step past 0.8 of the window, after a turn past 0.6), a verbatim tail of
:data:`KEEP_TAIL_TOKENS` tokens, and a second model, :data:`SUMMARIZER`, writing the
summaries. A message is 200 to 400 characters, some 75 tokens, so the 10-message thread
stays under both triggers through every step of the run, and the longer ones pass them.

For each size in :data:`SIZES`, one thread is given that many stored top-level messages,
written straight to the table (``bulk_create``: a 10,000-message thread takes seconds, not
10,000 engine steps): user and assistant alternate, 200 to 400 characters each, and every
:data:`TOOL_TURN_EVERY`-th answer first calls a tool, whose stored result follows the call,
as the engine stores them. ``Thread.message_seq`` is set to the last ``seq``. Only messages
are written: a thread's turns, logs and events of the past are not, since the engine reads
those by key or from a counter, never by scanning the thread's history.

A step is one user message (``message_queue``) and one flow driven here (``thread_drive``,
the engine alone, as in the engine bench's in-process case) whose model is an in-process
:class:`~agents.providers.scripted.Script` answering 200 to 400 characters of text at once;
the summarizer is a stored-rules scripted model answering a fixed summary, so its calls
take none of the script's answers. Each thread first takes one prime step, left out of
the figures: on a longer thread it runs the first compaction (before the model call past
0.8 of the window, after it past 0.6), a one-time cost (summarizing thousands of messages
in chunks) whose wall time is reported apart (``first_compaction_s``). Then the threads
take steps in rounds, one step of each size per round (so a drift of the machine's speed
falls on all sizes alike): :data:`WARMUP_STEPS` unmeasured, :data:`STATEMENT_SAMPLE_STEPS`
counted, :data:`STEPS` timed. The compactions a step runs (a compacted context grows back
to the trigger every 25 steps or so) are part of its cost, so the timed steps come last,
where the long threads compact again: ``compactions_timed`` says how many fell in them.

Every request the script receives is checked: a tool call is always followed by its
result; the 10-message thread's carries its whole history (the system prompt, every stored
message, the new one); a longer thread's, after its prime step, carries exactly one
archive marker (the system message that stands for the summarized range) and fits the
window: far fewer messages than the thread holds. Per step:

* the engine process's CPU (``time.process_time`` around ``thread_drive``): the table's
  p50 / p95 / p99 columns. A full garbage collection runs before each timed step, outside
  the measure, so that no step pays for the previous (longer) one's garbage; the collector's
  time within the step is noted (``gc_ms_p50``);
* its wall time (``wall_ms_p50``, ``wall_ms_p95``);
* the SQL statements, ``BEGIN`` and ``COMMIT`` included (``CaptureQueriesContext``, as the
  engine bench counts them), on the counted steps, whose capture would slow the timed ones;
* the context sent to the model: the UTF-8 bytes of every message text of the request the
  script received (``context_bytes_p50``) and its messages (``context_messages_p50``).

The model's own work is inside the step too, and small: the script answers at once, but it
counts the request's usage (a pass over every message's text) as a provider reports it.

Each row's ``measured`` gives its CPU and wall p50 over those at 10 messages; the
10,000-message row gives the statements at every size and the verdict.
"""

from __future__ import annotations

import gc
import json
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
    from agents.providers.base import LLMMessage, ProviderRequest
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
MODEL = "m"
SUMMARIZER = "summarizer"
TOOL = "order_lookup"
# The 10-message thread ends the run near 5,000 tokens, under the idle trigger's 0.6 of the
# window; the 100-message one starts near 7,300, past it (and the longer ones past the
# step's 0.8). The tail is the most a compaction keeps (half its target, 0.4 of the
# window): a compacted context is some 2,500 tokens and grows back to the idle trigger in
# about 25 steps.
CONTEXT_WINDOW = 10_000
KEEP_TAIL_TOKENS = 2_000
MARKER_PREFIX = "[Summary of the earlier conversation"
SUMMARY = {
    "intent": "The customer wants their orders delivered, tracked and refunded.",
    "decisions": ["Refund the damaged item once the return label is scanned."],
    "state": ["Orders are looked up with order_lookup by their five-digit number."],
    "artifacts": ["A return label was emailed to the customer."],
    "open_items": ["Confirm the replacement's delivery date."],
}
SUMMARIZER_CONFIG = {"rules": [{"respond": {"text": json.dumps(SUMMARY)}}]}

BUNDLE: dict[str, Any] = {
    "version": 1,
    "models": [
        {"name": MODEL, "provider": "scripted", "model_id": "scripted",
         "config": {"rules": [{"respond": {"text": "ok"}}]}},
        {"name": SUMMARIZER, "provider": "scripted", "model_id": "scripted",
         "config": SUMMARIZER_CONFIG},
    ],
    "prompts": [
        {"name": AGENT, "tool_description": "Answers customers", "model": MODEL,
         "prompt": "You are a support agent for an online shop. Answer in a few sentences.",
         "include_chat": True, "include_past_tools": True,
         "compaction": {"context_window": CONTEXT_WINDOW, "keep_tail_tokens": KEEP_TAIL_TOKENS,
                        "summarizer_model": SUMMARIZER}},
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

    answer_meta = {"model": MODEL, "prompt": AGENT}
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
    stored: int = 0  # the thread's messages once the step in hand has answered
    first_compaction_s: float = 0.0
    first_compaction: str = ""  # the tier and trigger of the prime step's compaction
    compactions_timed: int = 0
    cpu_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    gc_s: list[float] = field(default_factory=list)
    context_bytes: list[int] = field(default_factory=list)
    context_messages: list[int] = field(default_factory=list)
    statements: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stored = self.messages

    @property
    def compacted(self) -> bool:
        """Whether this thread is meant to pass the window (all but the shortest)."""
        return self.messages > SIZES[0]

    def compactions(self) -> int:
        """The compactions of this thread so far (rows, superseded ones included)."""
        from compaction.models import Compaction

        return Compaction.objects.filter(thread_id=self.thread.pk).count()


@dataclass
class ScriptedModel:
    """The in-process model every step calls, and the runtime that loads it with the
    summarizer beside it (stored rules: its calls take none of the script's answers)."""

    script: Script
    runtime: Runtime
    rng: random.Random

    @classmethod
    def create(cls) -> ScriptedModel:
        from agents.providers.base import ModelSpec
        from agents.providers.scripted import Script
        from threads.runtime.engine import Runtime

        script = Script()
        specs = {
            MODEL: script.spec(MODEL),
            SUMMARIZER: ModelSpec(name=SUMMARIZER, kind="scripted", model_id=SUMMARIZER,
                                  config=SUMMARIZER_CONFIG),
        }  # fmt: skip
        runtime = Runtime(load_model=specs.__getitem__, retry_base_delay_s=0)
        return cls(script, runtime, random.Random(0))  # noqa: S311 - filler text

    def request(self, size: Size) -> ProviderRequest:
        """The one request the step made to the main model (forgotten here, so requests do
        not pile up), checked (:func:`_checked_request`)."""
        if len(self.script.requests) != 1:
            raise BenchError(
                f"{size.messages} messages: {len(self.script.requests)} model calls in a step, "
                "expected 1"
            )
        request = self.script.requests.pop()
        _checked_request(size, request.messages)
        return request


def _queue(size: Size, model: ScriptedModel) -> None:
    """The step's user message, and the model's answer to it."""
    from threads.services.inbox import message_queue

    model.script.text(_text(model.rng))
    message_queue(thread=size.thread, role="user", content=_text(model.rng), wake=False)
    size.stored += 2


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


def _prime_step(size: Size, model: ScriptedModel) -> None:
    """The first step, unmeasured but for its wall time: on a long thread it runs the first
    compaction, before its model call (past 0.8 of the window) or after it (past the idle
    trigger's 0.6). Its request is checked like any, the marker aside: when the
    compaction runs after the call, the call still carries the whole history."""
    from compaction.models import Compaction

    _queue(size, model)
    started = time.perf_counter()
    _drive(size, model)
    elapsed = time.perf_counter() - started
    model.request(size)
    written = Compaction.objects.filter(thread_id=size.thread.pk).order_by("created_at").first()
    if (written is not None) != size.compacted:
        raise BenchError(
            f"{size.messages} messages: the prime step "
            f"{'compacted' if written else 'did not compact'} the context; the window "
            f"({CONTEXT_WINDOW:,} tokens) must keep {SIZES[0]} messages and no more under it"
        )
    if written is not None:
        size.first_compaction_s = elapsed
        size.first_compaction = f"{written.tier}, {written.trigger}"


def _warm_step(size: Size, model: ScriptedModel) -> None:
    _queue(size, model)
    _drive(size, model)
    model.request(size)


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


def _checked_request(size: Size, messages: Sequence[LLMMessage]) -> None:
    """What a step sent holds: every tool call followed by its result; on the shortest
    thread the whole history (the system prompt, every stored message, the new one); on a
    longer one, once compacted, one archive marker and fewer messages than the thread
    holds, within the window (so, at 1,000 messages and more, far fewer)."""
    from compaction.policy import llm_tokens

    _checked_pairs(size, messages)
    markers = sum(
        1 for m in messages if m.role == "system" and (m.content or "").startswith(MARKER_PREFIX)
    )
    if not size.compacted:
        if markers or len(messages) != size.stored:
            raise BenchError(
                f"{size.messages} messages: a call sent {len(messages)} messages ({markers} "
                f"archive markers), expected the whole history: {size.stored} (the system "
                "prompt, every stored message, the new one)"
            )
        return
    if size.stored <= size.messages + 2:
        return  # the prime step: its compaction may come after its call
    tokens = llm_tokens(messages)
    if markers != 1 or tokens > CONTEXT_WINDOW or len(messages) >= size.stored:
        raise BenchError(
            f"{size.messages} messages: a call sent {len(messages)} messages of {size.stored} "
            f"stored, {tokens:,} tokens, {markers} archive markers; expected one marker and "
            f"a context within the window ({CONTEXT_WINDOW:,} tokens)"
        )


def _checked_pairs(size: Size, messages: Sequence[LLMMessage]) -> None:
    """Every tool call is answered by a tool message right after it, and every tool message
    answers a call just before it (a compaction never splits them)."""
    waiting: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "tool":
            if message.tool_call_id not in waiting:
                raise BenchError(
                    f"{size.messages} messages: message {index} answers the call "
                    f"{message.tool_call_id}, which does not come just before it"
                )
            waiting.discard(message.tool_call_id)
            continue
        if waiting:
            raise BenchError(
                f"{size.messages} messages: the calls {sorted(waiting)} are not answered "
                f"before message {index}"
            )
        waiting = {call.id for call in message.tool_calls}
    if waiting:
        raise BenchError(f"{size.messages} messages: the calls {sorted(waiting)} are unanswered")


def _checked_answers(size: Size) -> None:
    """Every step's turn completed and stored its two messages, in ``message_seq`` order;
    the shortest thread was never compacted."""
    from threads.models import Message, RunStatus, Thread, Turn

    expected = size.messages + 2 * (1 + WARMUP_STEPS + STEPS + STATEMENT_SAMPLE_STEPS)
    thread = Thread.objects.get(pk=size.thread.pk)
    stored = Message.objects.filter(thread=thread).count()
    statuses = set(Turn.objects.filter(thread=thread).values_list("status", flat=True))
    if statuses != {RunStatus.COMPLETED} or stored != expected or size.stored != expected:
        raise BenchError(
            f"{size.messages} messages: turns ended {sorted(statuses)}, {stored} messages "
            f"stored (expected {expected})"
        )
    if thread.message_seq != stored:
        raise BenchError(f"{size.messages} messages: message_seq {thread.message_seq} != {stored}")
    if not size.compacted and size.compactions():
        raise BenchError(f"{size.messages} messages: the thread was compacted")


def _run_steps(sizes: Sequence[Size]) -> None:
    """A prime step on each size, then rounds of one step on each size: WARMUP_STEPS
    unmeasured, STATEMENT_SAMPLE_STEPS counted, then STEPS timed. The timed steps come last
    so that they span the compacted threads' second compaction (about 25 steps after the
    first), as a thread's steps span its compactions."""
    model = ScriptedModel.create()
    for size in sizes:
        _prime_step(size, model)
    for run, rounds in ((_warm_step, WARMUP_STEPS), (_counted_step, STATEMENT_SAMPLE_STEPS),
                        (_timed_step, STEPS)):  # fmt: skip
        before = [size.compactions() for size in sizes]
        for _ in range(rounds):
            for size in sizes:
                run(size, model)
        if run is _timed_step:
            for size, count in zip(sizes, before, strict=True):
                size.compactions_timed = size.compactions() - count
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
        context_messages_max=max(size.context_messages), compactions_timed=size.compactions_timed,
        first_compaction_s=round(size.first_compaction_s, 3) if size.compacted else None,
        first_compaction=size.first_compaction or None, build_s=round(size.build_s, 3),
    )  # fmt: skip
    if size is base:
        text = f"baseline; wall p50 {wall_p50:.1f} ms"
    else:
        text = f"CPU {cpu_ratio:.2f}x, wall {wall_ratio:.2f}x of 10"
    statements, compactions = _fewest_statements(size), size.compactions_timed
    return replace(
        row,
        measured=f"{text}; {statements} stmts; context {_kilobytes(size)}; "
        f"{compactions} compaction{'' if compactions == 1 else 's'} timed",
    )


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
