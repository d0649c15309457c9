"""observability.tracing and observability.propagation: one trace from an HTTP submit through
the Celery task to the model and tool calls, with the GenAI attributes, and the turn's events
carrying its trace id; nothing traced (and no ids on events) when tracing is off; message
content on spans only when its capture is turned on.

The spans go to an in-memory exporter, so the worker must run in this process: a Celery
worker (``celery.contrib.testing.worker.start_worker``, threads pool, like production's) in a
thread of the test process, consuming a private queue through the real Redis broker. The
trace context therefore still crosses the broker in the task message's headers, as it does
between a web and a worker process. The agent's tool is the demo's ``count_words`` (in the
global registry, which the worker's threads see; a test registry is a context variable)."""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import pytest
from celery.contrib.testing.worker import start_worker
from django.core.exceptions import MiddlewareNotUsed
from django.db import connection
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from rest_framework.test import APIClient

from agents.bundles import bundle_import
from common.redis_client import redis_client
from config import env
from config.celery import app
from observability import logcontext
from observability.propagation import traced_requests
from observability.spans import (
    SCHEMA_URL,
    SEMCONV_VERSION,
    span,
    tracing,
    tracing_restore,
    tracing_use,
)
from tenancy.models import Role, Tenant
from tests.worker import private_queue, queue_delete, tasks_routed_to
from threads.events import envelope_of
from threads.models import Event, Thread, Turn
from threads.runtime.driver import thread_drive
from threads.services.inbox import message_queue
from threads.services.threads import thread_create
from threads.services.wakeups import wake_thread

pytestmark = pytest.mark.django_db(transaction=True)

Json = dict[str, Any]
TIMEOUT_S = 30.0
# What the user says and the tool is called with: it must appear on no span unless the
# capture of message content is on.
WORDS = "planted words nobody should see"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, for the test, into an in-memory exporter (content capture off)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = tracing_use(provider)
    try:
        yield exporter
    finally:
        tracing_restore(previous)
        provider.shutdown()


@pytest.fixture
def worker() -> Iterator[str]:
    """A Celery worker in this process (threads pool) on a private queue, which this
    process's tasks go to; yields the queue."""
    queue = private_queue()
    try:
        with (
            tasks_routed_to(queue),
            start_worker(app, pool="threads", concurrency=2, perform_ping_check=False,
                         queues=[queue], loglevel="WARNING"),
        ):  # fmt: skip
            yield queue
    finally:
        queue_delete(queue)


@pytest.fixture
def api(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    """The tenant's member key; agent ``counter`` calls ``count_words`` once, then answers
    with its result (a scripted model)."""
    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "models": [{"name": "m", "provider": "scripted", "model_id": "scripted-1", "config": {
                "rules": [
                    {"when": {"last_role": "tool"},
                     "respond": {"text": "Counted: {last_tool_result}"}},
                    {"respond": {"tool_calls": [{"name": "count_words",
                                                 "arguments": {"text": WORDS}}]}},
                ]}}],
            "prompts": [{"name": "p", "tool_description": "The counter", "prompt": "You count.",
                         "model": "m", "include_chat": True, "tools": ["count_words"]}],
            "agents": [{"name": "counter", "side_a": {"prompt": "p"}}],
        },
    )  # fmt: skip
    return client_for(tenant, Role.MEMBER)


def _submit(api: APIClient, thread: Thread, **headers: str) -> str:
    response = api.post(
        f"/api/v1/threads/{thread.id}/messages", {"content": WORDS}, format="json",
        headers=headers,
    )  # fmt: skip
    assert response.status_code == 202, response.content
    turn_id: str = response.json()["turn_id"]
    return turn_id


def _finished(turn_id: str) -> Turn:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        turn = Turn.objects.get(pk=turn_id)
        if turn.status in ("completed", "failed", "cancelled"):
            return turn
        time.sleep(0.05)
    raise AssertionError(f"turn {turn_id} did not finish in {TIMEOUT_S} s")


def _task_done(spans: InMemorySpanExporter) -> list[ReadableSpan]:
    """The finished spans once the drive task's span has ended (after the turn's end)."""
    deadline = time.monotonic() + TIMEOUT_S
    while not _named(spans.get_finished_spans(), "threads.drive_thread"):
        assert time.monotonic() < deadline, "the drive task's span did not end"
        time.sleep(0.05)
    return list(spans.get_finished_spans())


def _named(spans: Sequence[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


def _one(spans: Sequence[ReadableSpan], prefix: str) -> ReadableSpan:
    found = _named(spans, prefix)
    assert len(found) == 1, [span.name for span in spans]
    return found[0]


def _parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _attributes(span: ReadableSpan) -> Mapping[str, Any]:
    return dict(span.attributes or {})


# One trace, request to tool ------------------------------------------------------------------


def test_one_trace_runs_from_the_http_submit_through_the_task_to_the_model_and_tool_calls(
    spans: InMemorySpanExporter, worker: str, api: APIClient, tenant: Tenant
) -> None:
    thread = thread_create(tenant=tenant, agent_name="counter")
    caller_trace = "0af7651916cd43dd8448eb211c80319c"
    turn_id = _submit(api, thread, traceparent=f"00-{caller_trace}-b7ad6b7169203331-01")
    turn = _finished(turn_id)
    assert turn.status == "completed"

    finished = _task_done(spans)
    server = _one(finished, "POST /api/v1/threads/")
    task = _one(finished, "threads.drive_thread")
    agent = _one(finished, "invoke_agent counter")
    chats = _named(finished, "chat scripted-1")
    tool = _one(finished, "execute_tool count_words")
    # The caller's trace is continued, one trace throughout.
    assert {span.context.trace_id for span in finished} == {int(caller_trace, 16)}
    assert server.kind == SpanKind.SERVER
    assert _parent_of(server) == int("b7ad6b7169203331", 16)
    assert _attributes(server)["http.route"] == "/api/v1/threads/<uuid:thread_id>/messages"
    assert _attributes(server)["http.response.status_code"] == 202
    # Request -> the task (across the broker) -> the turn -> its calls.
    assert task.kind == SpanKind.CONSUMER
    assert _parent_of(task) == server.context.span_id
    assert _parent_of(agent) == task.context.span_id
    assert len(chats) == 2  # the call that asked for the tool, the one that answered
    assert {_parent_of(chat) for chat in chats} == {agent.context.span_id}
    assert _parent_of(tool) == agent.context.span_id
    assert _attributes(agent) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "counter",
        "gen_ai.conversation.id": str(thread.id),
        "platform.tenant.id": str(tenant.id),
        "platform.turn.id": turn_id,
        "platform.flow.id": _attributes(agent)["platform.flow.id"],
    }
    first = min(chats, key=lambda span: span.start_time or 0)
    chat = _attributes(first)
    assert chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.provider.name"] == chat["gen_ai.system"] == "scripted"
    assert chat["gen_ai.request.model"] == chat["gen_ai.response.model"] == "scripted-1"
    assert chat["gen_ai.response.finish_reasons"] == ("tool_call",)
    assert chat["gen_ai.usage.input_tokens"] > 0
    assert chat["gen_ai.usage.output_tokens"] > 0
    assert first.kind == SpanKind.CLIENT
    assert first.instrumentation_scope is not None
    assert first.instrumentation_scope.schema_url == SCHEMA_URL
    tool_attributes = _attributes(tool)
    assert tool_attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool_attributes["gen_ai.tool.name"] == "count_words"
    assert tool_attributes["gen_ai.tool.call.id"]
    assert tool.status.is_ok

    events = list(Event.objects.filter(thread=thread, turn_id=turn_id))
    assert events
    trace_id = f"{int(caller_trace, 16):032x}"
    ours = {span.context.span_id for span in finished}
    for event in events:
        envelope = envelope_of(event)
        assert envelope["trace_id"] == trace_id, envelope["type"]
        assert int(envelope["span_id"], 16) in ours, envelope["type"]
    by_type = {event.type: event for event in events}
    assert int(by_type["tool.started"].span_id, 16) == tool.context.span_id
    assert int(by_type["turn.started"].span_id, 16) == agent.context.span_id
    listed = api.get(f"/api/v1/threads/{thread.id}/events").json()
    assert {item["trace_id"] for item in listed["results"] if item["turn_id"] == turn_id} == {
        trace_id
    }

    # Content capture is off by default: the user's words are on no span.
    for each in finished:
        assert WORDS not in json.dumps(_attributes(each), default=str), each.name
        assert not {"gen_ai.input.messages", "gen_ai.output.messages",
                    "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} & set(
            _attributes(each)
        )  # fmt: skip


def test_a_submit_without_a_caller_trace_starts_one_at_the_server_span(
    spans: InMemorySpanExporter, worker: str, api: APIClient, tenant: Tenant
) -> None:
    thread = thread_create(tenant=tenant, agent_name="counter")
    turn_id = _submit(api, thread)
    _finished(turn_id)

    finished = _task_done(spans)
    server = _one(finished, "POST /api/v1/threads/")
    assert server.parent is None
    assert {span.context.trace_id for span in finished} == {server.context.trace_id}
    assert len(finished) >= 5  # server, task, turn, two model calls, the tool call


# Sandbox calls and subagents ----------------------------------------------------------------


def test_a_code_tool_runs_under_a_sandbox_span_of_its_tool_call(
    spans: InMemorySpanExporter, tenant: Tenant
) -> None:
    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "code_tools": [{"name": "shout", "description": "Shouts the text",
                            "args_schema": {"type": "object",
                                            "properties": {"text": {"type": "string"}}},
                            "source": "export default ({ text }) => text.toUpperCase();"}],
            "models": [{"name": "m", "provider": "scripted", "model_id": "scripted", "config": {
                "rules": [
                    {"when": {"last_role": "tool"}, "respond": {"text": "{last_tool_result}"}},
                    {"respond": {"tool_calls": [{"name": "shout",
                                                 "arguments": {"text": "hey"}}]}},
                ]}}],
            "prompts": [{"name": "p", "tool_description": "The shouter", "prompt": "Shout.",
                         "model": "m", "include_chat": True, "tools": ["shout"]}],
            "agents": [{"name": "shouter", "side_a": {"prompt": "p"}}],
        },
    )  # fmt: skip
    thread = thread_create(tenant=tenant, agent_name="shouter")

    _driven(thread)

    finished = spans.get_finished_spans()
    tool = _one(finished, "execute_tool shout")
    sandbox = _one(finished, "sandbox shout")
    assert _parent_of(sandbox) == tool.context.span_id
    assert _attributes(sandbox)["platform.sandbox.tool"] == "shout"
    assert tool.status.is_ok


def test_a_non_blocking_subagent_is_woken_with_the_trace_of_the_call_that_started_it(
    spans: InMemorySpanExporter, tenant: Tenant
) -> None:
    text = {"name": "w", "provider": "scripted", "model_id": "scripted",
            "config": {"rules": [{"respond": {"text": "x"}}]}}  # fmt: skip
    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "models": [text, {"name": "m", "provider": "scripted", "model_id": "scripted",
                              "config": {"rules": [
                {"when": {"last_role": "tool"}, "respond": {"text": "Started it."}},
                {"respond": {"tool_calls": [{"name": "pair", "arguments": {"message": "go"}}]}},
            ]}}],
            "prompts": [
                {"name": "boss", "tool_description": "The boss", "prompt": "Delegate.",
                 "model": "m", "include_chat": True,
                 "tools": [{"name": "pair", "blocking": False}]},
                {"name": "worker", "tool_description": "A worker", "prompt": "Work.",
                 "model": "w"},
                {"name": "checker", "tool_description": "A checker", "prompt": "Check.",
                 "model": "w"},
            ],
            "agents": [
                {"name": "boss", "side_a": {"prompt": "boss"}},
                {"name": "pair", "type": "dual_ai", "side_a": {"prompt": "worker"},
                 "side_b": {"prompt": "checker"}, "max_session_turns": 1,
                 "expose_as_tool": True, "tool_description": "A worker and a checker"},
            ],
        },
    )  # fmt: skip
    parent = thread_create(tenant=tenant, agent_name="boss")

    sent = _driven(parent)

    child = Thread.objects.get(parent=parent)
    [wake] = [message for message in sent if message["args"][0] == str(child.pk)]
    finished = spans.get_finished_spans()
    call = _one(finished, "execute_tool pair")
    _version, trace_id, span_id, _flags = wake["headers"]["traceparent"].split("-")
    assert int(trace_id, 16) == call.context.trace_id
    assert int(span_id, 16) == call.context.span_id  # sent on commit, inside the call


def test_a_task_sent_through_send_task_inside_a_span_carries_its_context(
    spans: InMemorySpanExporter,
) -> None:
    queue = private_queue()
    try:
        with tasks_routed_to(queue), span("sending", attributes={}) as opened:
            # A retried wake-up goes through Celery's send_task (a plain one is an LPUSH).
            assert wake_thread(uuid.uuid4(), uuid.uuid4(), attempt=1)
        [raw] = _queued(queue)
    finally:
        queue_delete(queue)

    assert opened is not None
    context = opened.get_span_context()
    headers = json.loads(raw)["headers"]
    assert headers["traceparent"] == (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    )


def _queued(queue: str) -> list[bytes]:
    """The task messages waiting in ``queue`` (nobody consumes it)."""
    return cast(list[bytes], redis_client().lrange(queue, 0, -1))


def _driven(thread: Thread) -> list[Json]:
    """Queue a user message on ``thread`` and drive it in this process; the drive tasks
    its work sent (to a private queue nobody consumes), with their headers."""
    queue = private_queue()
    try:
        with tasks_routed_to(queue):
            message_queue(thread=thread, role="user", content="go")
            thread_drive(thread_id=thread.id, tenant_id=thread.tenant_id)
            raw = _queued(queue)
    finally:
        queue_delete(queue)
    sent = []
    for item in raw:
        message = json.loads(item)
        body = json.loads(base64.b64decode(message["body"]))
        sent.append({"args": body[0], "headers": message["headers"]})
    return sent


# Content capture ----------------------------------------------------------------------------


def test_content_capture_puts_prompts_completions_and_tool_io_on_the_spans(
    api: APIClient, tenant: Tenant
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = tracing_use(provider, capture_content=True)
    try:
        thread = _submitted_in_process(api, tenant)
    finally:
        tracing_restore(previous)

    finished = exporter.get_finished_spans()
    chats = sorted(_named(finished, "chat "), key=lambda span: span.start_time or 0)
    sent = json.loads(_attributes(chats[0])["gen_ai.input.messages"])
    assert sent[-1] == {"role": "user", "parts": [{"type": "text", "content": WORDS}]}
    said = json.loads(_attributes(chats[0])["gen_ai.output.messages"])
    assert said[0]["parts"][0]["name"] == "count_words"
    assert said[0]["finish_reason"] == "tool_call"
    tool = _attributes(_one(finished, "execute_tool count_words"))
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"text": WORDS}
    assert tool["gen_ai.tool.call.result"] == "5"
    assert _attributes(_one(finished, "invoke_agent counter"))["gen_ai.conversation.id"] == str(
        thread.id
    )


# Tracing off ---------------------------------------------------------------------------------


def test_tracing_off_traces_nothing_and_events_carry_no_trace_ids(
    api: APIClient, tenant: Tenant
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing_restore(tracing_use(provider))  # in use once, then off again
    assert tracing() is None

    thread = _submitted_in_process(api, tenant)

    assert exporter.get_finished_spans() == ()
    events = list(Event.objects.filter(thread=thread))
    assert {event.type for event in events} >= {"turn.started", "tool.started", "turn.completed"}
    for event in events:
        envelope = envelope_of(event)
        assert (envelope["trace_id"], envelope["span_id"]) == (None, None), envelope["type"]


def test_tracing_off_keeps_the_request_middleware_out_of_the_chain() -> None:
    assert tracing() is None
    with pytest.raises(MiddlewareNotUsed):
        traced_requests(lambda request: None)


class _IdsSeen(logging.Handler):
    """The log ids bound as each record is emitted."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[dict[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(logcontext.current())


def test_the_drive_and_the_turn_bind_their_log_ids_with_tracing_off(
    api: APIClient, tenant: Tenant
) -> None:
    assert tracing() is None
    handler = _IdsSeen()
    queries = logging.getLogger("django.db.backends")  # a record per SQL statement
    queries.addHandler(handler)
    level, queries.level = queries.level, logging.DEBUG
    debug_cursor, connection.force_debug_cursor = connection.force_debug_cursor, True
    try:
        thread = _submitted_in_process(api, tenant)
    finally:
        queries.removeHandler(handler)
        queries.setLevel(level)
        connection.force_debug_cursor = debug_cursor

    turn = Turn.objects.get(thread=thread)
    drive = {"tenant_id": str(tenant.id), "thread_id": str(thread.id)}
    assert drive in handler.seen  # the drive's own statements (its fence, its inbox)
    assert {**drive, "turn_id": str(turn.pk)} in handler.seen  # the turn's
    assert {} in handler.seen  # the request's, outside any drive
    assert logcontext.current() == {}


@pytest.mark.parametrize(
    ("variables", "exporter"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, None),
    ],
)
def test_tracing_is_off_unless_the_otel_variables_name_an_exporter(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], exporter: str | None
) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                 "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED",
                 "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)

    config = env.tracing()

    assert config["exporter"] == exporter
    assert config["capture_content"] is False


def test_the_semantic_conventions_followed_are_pinned() -> None:
    assert SEMCONV_VERSION == "1.44.0"
    assert SCHEMA_URL == "https://opentelemetry.io/schemas/1.44.0"


def _submitted_in_process(api: APIClient, tenant: Tenant) -> Thread:
    """A turn submitted over HTTP (its wake-up goes to a queue nobody consumes) and driven
    in this process; the thread once the turn is done."""
    thread = thread_create(tenant=tenant, agent_name="counter")
    queue = private_queue()
    try:
        with tasks_routed_to(queue):
            turn_id = _submit(api, thread)
            thread_drive(thread_id=thread.id, tenant_id=tenant.id)
    finally:
        queue_delete(queue)
    assert Turn.objects.get(pk=turn_id).status == "completed"
    return thread
