"""Long threads in the engine: a thread pushed past its model's window keeps working, with
the context compacted as a durable overlay (never splitting a tool call from its result,
the last user message verbatim), a context-length error compacted and retried once, the
idle trigger, the recall tool bringing back what was compacted away, the hooks, and the
circuit breaker's truncation. In process, with real PostgreSQL and Redis; the model is a
test provider that enforces a context window as a real one does."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from agents.providers.base import (
    CONTEXT_LENGTH_EXCEEDED,
    LLMMessage,
    ModelSpec,
    ProviderError,
    ProviderRequest,
    ProviderResponse,
    StreamChunk,
    ToolCall,
    response_chunks,
)
from agents.providers.scripted import counted_usage
from agents.registry import hook, tool
from compaction.models import Compaction, CompactionStatus
from compaction.summary import INSTRUCTIONS
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import Event, Log, Message, Thread, Turn
from threads.runtime.driver import thread_drive
from threads.runtime.engine import Runtime
from usage.models import LedgerEntry

FACT = "the code word of order 7781 is PAPAYA-42"
QUESTION = "What was the code word of my order?"
FILLER = (
    "Thanks, and could you also check the delivery window for the parcel, the invoice "
    "address and whether the discount applies to the replacement item this week please"
)


def _last(messages: list[LLMMessage], role: str) -> LLMMessage | None:
    return next((message for message in reversed(messages) if message.role == role), None)


@dataclass
class WindowModel:
    """A model with a context window: a request past ``window`` tokens (the scripted count,
    a token per four characters) is refused with ``context_length_exceeded``. It answers
    the summarizer's requests with a summary that keeps no detail; otherwise: a tool call
    to ``echo`` when the user asks to look something up, ``recall`` when asked for the code
    word, the code word once recall returned it, and a long plain answer the rest of the
    time. Every request it is sent is kept."""

    window: int
    requests: list[ProviderRequest] = field(default_factory=list)
    summaries: int = 0
    refused: int = 0
    fail_summaries: bool = False

    def factory(self, spec: ModelSpec) -> WindowModel:
        return self

    def generate(self, request: ProviderRequest, *, abort: Any = None) -> ProviderResponse:
        sent = counted_usage(request, "", "", ()).prompt_tokens
        if sent > self.window:
            self.refused += 1
            raise ProviderError(
                f"the request has {sent} tokens; the maximum context length is {self.window}",
                retryable=False, http_status=400, provider="test", code=CONTEXT_LENGTH_EXCEEDED,
            )  # fmt: skip
        messages = list(request.messages)
        if messages and messages[0].text == INSTRUCTIONS:
            self.summaries += 1
            if self.fail_summaries:
                raise ProviderError("the summarizer is down", retryable=False, provider="test")
            summary = {"intent": "customer support chat", "state": ["orders were discussed"]}
            return self._answer(request, json.dumps(summary))
        self.requests.append(request)
        last = messages[-1]
        if last.role == "tool":
            found = re.search(r"code word of order 7781 is ([A-Z]+-\d+)", last.text)
            if found and last.name == "recall":
                return self._answer(request, f"The code word is {found.group(1)}.")
            return self._answer(request, "Done." if last.name == "fetch_report" else
                                "Done: " + FILLER)  # fmt: skip
        user = _last(messages, "user")
        text = user.text if user is not None else ""
        if QUESTION in text:
            return self._answer(request, "", ToolCall("r1", "recall", {"query": "code word"}))
        if text.startswith("Fetch"):
            return self._answer(request, "", ToolCall("f1", "fetch_report", {}))
        if text.startswith("Look up"):
            return self._answer(request, "", ToolCall("e1", "echo", {"text": text[8:] * 6}))
        return self._answer(request, "Sure. " + FILLER)

    def stream(self, request: ProviderRequest, *, abort: Any = None) -> Iterator[StreamChunk]:
        yield from response_chunks(self.generate(request, abort=abort), chunk_size=None)

    def _answer(self, request: ProviderRequest, text: str, *calls: ToolCall) -> ProviderResponse:
        return ProviderResponse(
            content=text, reasoning="", tool_calls=calls,
            finish_reason="tool_calls" if calls else "stop",
            usage=counted_usage(request, text, "", calls), model_id="window", provider="test",
        )  # fmt: skip


def define(
    engine: Engine, *, window: int, tools: tuple[str, ...] = ("echo",), **compaction: Any
) -> Thread:
    engine.define(
        models=[{"name": "m", "provider": "scripted", "model_id": "window",
                 "capabilities": {"max_context_tokens": window},
                 "input_price": "1", "output_price": "2",
                 "config": {"rules": [{"respond": {"text": "x"}}]}}],
        prompts=[prompt("support", tools=list(tools), compaction=compaction)],
        agents=[{"name": "support", "side_a": {"prompt": "support", "max_steps": 10}}],
    )  # fmt: skip
    return engine.thread("support")


def turn(engine: Engine, thread: Thread, model: WindowModel, text: str) -> Turn:
    engine.send(thread, text)
    runtime = Runtime(provider_factory=model.factory, retry_base_delay_s=0)
    thread_drive(thread_id=thread.pk, runtime=runtime)
    thread.refresh_from_db()
    return Turn.objects.filter(thread=thread).order_by("-created_at").first()  # type: ignore[return-value]


def turns_until_compacted(engine: Engine, thread: Thread, model: WindowModel) -> None:
    """Turns of filler until the thread's first compaction (at most 39)."""
    number = 0
    while not Compaction.objects.filter(thread=thread).exists():
        number += 1
        assert number < 40
        turn(engine, thread, model, f"Turn {number}. {FILLER}")


def unsplit(request: ProviderRequest) -> None:
    """Every tool call of the request is answered by the result that follows it, and every
    result answers a call."""
    open_calls: set[str] = set()
    for index, message in enumerate(request.messages):
        if message.role == "assistant":
            assert not open_calls, f"calls {open_calls} unanswered before message {index}"
            open_calls = {call.id for call in message.tool_calls}
        elif message.role == "tool":
            assert message.tool_call_id in open_calls, f"result {index} answers no call"
            open_calls.discard(message.tool_call_id)
        else:
            assert not open_calls, f"calls {open_calls} unanswered before message {index}"


def ranges_keep_pairs(thread: Thread) -> None:
    """No compaction's range holds a tool call whose result is outside it, or the reverse."""
    rows = list(Message.objects.filter(thread=thread, depth=0).order_by("seq"))
    # (call's seq, result's seq): a result answers the latest call with its id (the test
    # model reuses ids).
    pairs: list[tuple[int, int]] = []
    calls: dict[str, int] = {}
    for row in rows:
        calls.update((call["id"], row.seq) for call in row.tool_calls or [])
        if row.role == "tool":
            pairs.append((calls[row.tool_call_id], row.seq))
    assert pairs
    for compaction in Compaction.objects.filter(thread=thread).exclude(to_seq=0):
        for call, result in pairs:
            inside = compaction.from_seq <= result <= compaction.to_seq
            call_inside = compaction.from_seq <= call <= compaction.to_seq
            assert inside == call_inside, (compaction.from_seq, compaction.to_seq, call, result)


def test_two_hundred_turns_past_the_window_keep_working_and_recall_a_compacted_fact(
    engine: Engine,
) -> None:
    thread = define(engine, window=3_000, keep_tail_tokens=600, idle_trigger=1.0)
    model = WindowModel(window=3_000)
    for number in range(1, 201):
        if number == 1:
            text = f"Look up my order: {FACT}."
        elif number == 150:
            text = QUESTION
        elif number % 7 == 0:
            text = f"Look up the parcel of turn {number}."
        else:
            text = f"Turn {number}. {FILLER}"
        before = len(model.requests)
        ended = turn(engine, thread, model, text)
        assert ended.status == "completed", (number, ended.outcome, ended.error)
        stored_user = Message.objects.filter(thread=thread, role="user").order_by("-seq").first()
        for request in model.requests[before:]:
            unsplit(request)
            assert _last(list(request.messages), "user").text == stored_user.content  # type: ignore[union-attr]
        if number == 150:
            answer = Message.objects.filter(thread=thread, role="assistant").order_by("-seq")[0]
            assert answer.content == "The code word is PAPAYA-42."

    assert model.refused == 0  # proactive compaction kept every context inside the window
    compactions = Compaction.objects.filter(thread=thread)
    assert compactions.filter(trigger="proactive").count() >= 5
    assert compactions.filter(status=CompactionStatus.ACTIVE).count() == 1
    ranges_keep_pairs(thread)
    # The fact was compacted away, then recalled byte for byte.
    fact_row = Message.objects.get(thread=thread, role="tool", seq__lte=4)
    assert FACT in (fact_row.content or "")
    first = compactions.order_by("created_at").first()
    assert first is not None
    assert first.to_seq >= fact_row.seq
    recalled = Message.objects.get(thread=thread, role="tool", name="recall")
    found = json.loads(recalled.content or "")["messages"]
    assert {"seq": fact_row.seq, "role": "tool", "name": "echo", "content": fact_row.content,
            "created_at": fact_row.created_at} in found  # fmt: skip
    # Every compaction is in the events, and its summarizer's spend in the logs and ledger.
    completed = Event.objects.filter(thread=thread, type="context.compaction.completed")
    assert completed.count() == compactions.count()
    summarized = compactions.filter(tier="summary")
    assert summarized.exists()
    assert all(row.input_tokens > 0 and row.cost_micros for row in summarized)
    purposes = Log.objects.filter(thread=thread, kind="llm", data__purpose="compaction")
    assert purposes.count() == model.summaries
    ledger = LedgerEntry.objects.filter(thread_id=thread.pk, key__startswith="compaction:")
    assert ledger.count() == model.summaries
    assert sum(row.cost_micros or 0 for row in summarized) == sum(
        e.cost_micros or 0 for e in ledger
    )


def test_a_context_length_error_compacts_and_retries_the_step_once(engine: Engine) -> None:
    # The policy believes the window is large: only the provider's refusal shows otherwise.
    thread = define(engine, window=1_500, context_window=200_000)
    model = WindowModel(window=1_000_000)
    for number in range(24):
        assert turn(engine, thread, model, f"Turn {number}. {FILLER}").status == "completed"
    model.window = 1_500
    before = len(model.requests)

    ended = turn(engine, thread, model, f"And now? {FILLER}")

    assert ended.status == "completed"
    assert model.refused == 1
    assert len(model.requests) == before + 1  # the retried call
    compaction = Compaction.objects.get(thread=thread)
    assert compaction.trigger == "reactive"
    assert compaction.status == CompactionStatus.ACTIVE
    refused = [log.data["error"] for log in Log.objects.filter(thread=thread, kind="llm")]
    assert any("maximum context length is 1500" in (e or "") for e in refused)  # for the audit
    assert not Message.objects.filter(thread=thread, status="failed").exists()  # nothing shown


def test_the_idle_trigger_compacts_after_the_turn(engine: Engine) -> None:
    thread = define(engine, window=4_000, keep_tail_tokens=400, idle_trigger=0.3, trigger=0.9)
    model = WindowModel(window=4_000)
    turns_until_compacted(engine, thread, model)
    compaction = Compaction.objects.get(thread=thread)
    assert compaction.trigger == "idle"
    # It ran after the turn had ended: its events follow turn.completed.
    events = list(
        Event.objects.filter(thread=thread).order_by("sequence").values_list("type", flat=True)
    )
    ended = len(events) - 1 - events[::-1].index("turn.completed")
    assert events[ended + 1 :] == [
        "context.compaction.started", "model.completed", "cost.recorded",
        "context.compaction.completed",
    ]  # fmt: skip


def test_reverting_restores_the_originals_to_the_next_step(engine: Engine) -> None:
    skip = {"on": False}

    @hook("before_compaction", id="gate")
    def gate(state: Any, info: dict[str, Any], context: Any) -> dict[str, Any]:
        return {**info, "skip": skip["on"]}

    seen: list[dict[str, Any]] = []

    @hook("after_compaction", id="audit")
    def audit(state: Any, compaction: dict[str, Any], context: Any) -> None:
        seen.append(compaction)

    engine.define(
        models=[{"name": "m", "provider": "scripted", "model_id": "window",
                 "config": {"rules": [{"respond": {"text": "x"}}]}}],
        prompts=[prompt("support", hooks=["gate", "audit"],
                        compaction={"context_window": 2_000, "keep_tail_tokens": 300,
                                    "idle_trigger": 1.0})],
        agents=[{"name": "support", "side_a": {"prompt": "support"}}],
    )  # fmt: skip
    thread = engine.thread("support")
    model = WindowModel(window=1_000_000)
    turns_until_compacted(engine, thread, model)
    compaction = Compaction.objects.get(thread=thread)
    assert [row["id"] for row in seen] == [str(compaction.id)]
    hidden = (
        Message.objects.filter(thread=thread, role="user", seq__lte=compaction.to_seq)
        .exclude(seq=compaction.first_user_seq)
        .order_by("-seq")[0]
    )
    assert all(hidden.content != m.text for m in model.requests[-1].messages)

    from compaction.services import compaction_revert

    compaction_revert(thread=thread, compaction_id=compaction.id)
    skip["on"] = True
    turn(engine, thread, model, "One more.")

    texts = [message.text for message in model.requests[-1].messages]
    assert hidden.content in texts
    assert not any(text.startswith("[Summary of the earlier") for text in texts)
    assert Compaction.objects.get(pk=compaction.pk).status == CompactionStatus.REVERTED
    assert Compaction.objects.filter(thread=thread).count() == 1  # the gate skipped the next


def test_a_failing_summarizer_truncates_with_a_warning_and_the_breaker_opens(
    engine: Engine,
) -> None:
    thread = define(engine, window=2_000, keep_tail_tokens=300, idle_trigger=1.0)
    model = WindowModel(window=2_000, fail_summaries=True)
    for number in range(60):
        assert turn(engine, thread, model, f"Turn {number}. {FILLER}").status == "completed"
    rows = list(Compaction.objects.filter(thread=thread).order_by("created_at"))
    assert len(rows) >= 4
    assert {row.tier for row in rows} == {"truncation"}
    # After three failures in a row the summarizer is not called again for a while.
    assert model.summaries == 3
    assert model.refused == 0
    warnings = Event.objects.filter(thread=thread, type="runtime.warning")
    assert warnings.count() == len(rows)
    assert Event.objects.filter(thread=thread, type="context.compaction.failed").count() == len(
        rows
    )


@pytest.mark.parametrize("tail", [0, 50])
def test_plan_never_splits_a_call_from_its_result(tail: int) -> None:
    from compaction.compact import plan

    def message(seq: int, role: str, **fields: Any) -> dict[str, Any]:
        return {"seq": seq, "role": role, "content": "x" * 100, **fields}

    calls = json.dumps([{"id": "c1", "type": "function",
                         "function": {"name": "echo", "arguments": "{}"}},
                        {"id": "c2", "type": "function",
                         "function": {"name": "echo", "arguments": "{}"}}])  # fmt: skip
    stored = [
        message(1, "user"), message(2, "assistant"), message(3, "user"),
        message(4, "assistant", tool_calls=calls), message(5, "tool", tool_call_id="c1"),
        message(6, "tool", tool_call_id="c2"), message(7, "assistant"),
    ]  # fmt: skip
    chosen = plan(stored, tail)
    assert chosen is not None
    covered = [row["seq"] for row in chosen.covered]
    assert chosen.first_user_seq == 1
    assert 1 not in covered
    assert covered in ([2, 3], [2, 3, 4, 5, 6], [2, 3, 4, 5, 6, 7])


def test_old_large_tool_results_are_cleared_first_and_spilled_to_files(engine: Engine) -> None:
    @tool(description="A long report.")
    def fetch_report(state: Any) -> str:
        return "R" * 3_000

    thread = define(
        engine, window=6_000, tools=("fetch_report",), keep_tail_tokens=800,
        tool_result_max_chars=1_000, idle_trigger=1.0,
    )  # fmt: skip
    model = WindowModel(window=6_000)
    number = 0
    while not Compaction.objects.filter(thread=thread).exists():
        number += 1
        assert number < 20
        assert turn(engine, thread, model, f"Fetch report {number}.").status == "completed"
    compaction = Compaction.objects.get(thread=thread)
    assert (compaction.tier, compaction.to_seq, model.summaries) == ("tool_results", 0, 0)
    assert compaction.cost_micros == 0
    turn(engine, thread, model, "Fetch one more.")

    cleared = Message.objects.filter(
        thread=thread, role="tool", seq__lte=compaction.cleared_through
    ).order_by("seq")
    assert cleared.exists()
    sent = {m.text for m in model.requests[-2].messages if m.role == "tool"}
    for row in cleared:
        stub = next(text for text in sent if f"recall with seq {row.seq}]" in text)
        assert f"/.context/tool-results/{row.seq}.txt" in stub
        assert len(stub) < 400
        assert read_file(thread, f"/.context/tool-results/{row.seq}.txt") == row.content
    spilled = Event.objects.filter(thread=thread, type="output.spilled")
    assert sorted(e.payload["seq"] for e in spilled) == [row.seq for row in cleared]
    # The newest results are not cleared.
    newest = Message.objects.filter(thread=thread, role="tool").order_by("-seq")[0]
    assert newest.content in {m.text for m in model.requests[-1].messages}


def read_file(thread: Thread, path: str) -> str:
    from threads.services.files.reading import file_read

    data = file_read(thread=thread, path=path)
    assert data is not None, path
    return data.decode()


def test_plan_keeps_a_call_still_waiting_for_its_result() -> None:
    from compaction.compact import plan

    waiting = json.dumps([{"id": "w1", "type": "function",
                           "function": {"name": "refund", "arguments": "{}"}}])  # fmt: skip
    stored = [
        {"seq": seq, "role": role, "content": "x" * 100}
        for seq, role in enumerate(["user", "assistant", "user", "assistant", "user"], start=1)
    ]
    stored.append({"seq": 6, "role": "assistant", "content": None, "tool_calls": waiting})
    chosen = plan(stored, 0)  # no tail asked for: the waiting call is kept all the same
    assert chosen is not None
    assert [row["seq"] for row in chosen.covered] == [2, 3, 4, 5]


def test_a_compaction_that_breaks_leaves_the_step_uncompacted_with_a_warning(
    engine: Engine,
) -> None:
    from agents.models import Model

    engine.define(
        models=[{"name": "m", "provider": "scripted", "model_id": "window",
                 "config": {"rules": [{"respond": {"text": "x"}}]}},
                {"name": "cheap", "provider": "scripted", "model_id": "window",
                 "config": {"rules": [{"respond": {"text": "{}"}}]}}],
        prompts=[prompt("support", compaction={"context_window": 2_000, "idle_trigger": 1.0,
                                               "summarizer_model": "cheap"})],
        agents=[{"name": "support", "side_a": {"prompt": "support"}}],
    )  # fmt: skip
    thread = engine.thread("support")
    # The summarizer's definition goes away under the running thread.
    Model.objects.filter(tenant=engine.tenant, name="cheap").delete()
    model = WindowModel(window=1_000_000)
    for number in range(30):
        assert turn(engine, thread, model, f"Turn {number}. {FILLER}").status == "completed"
    warnings = Event.objects.filter(thread=thread, type="runtime.warning")
    assert warnings.exists()
    assert {e.payload["code"] for e in warnings} == {"compaction_error"}
    assert not Compaction.objects.filter(thread=thread).exists()
    assert model.summaries == 0


def test_the_tool_inventory_lists_recall_while_the_side_is_compacted(
    engine: Engine, member: Any
) -> None:
    thread = define(engine, window=2_000, keep_tail_tokens=300, idle_trigger=1.0)
    model = WindowModel(window=1_000_000)
    path = f"/api/v1/threads/{thread.id}/tools"
    assert [tool["name"] for tool in member.get(path).json()["tools"]] == ["echo"]
    turns_until_compacted(engine, thread, model)
    turn(engine, thread, model, "And one more.")  # a step of a compacted side: recall offered

    listed = [tool["name"] for tool in member.get(path).json()["tools"]]
    offered = [spec.name for spec in model.requests[-1].tools]
    assert listed == offered == ["recall", "echo"]
