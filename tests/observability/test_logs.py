"""observability.logs: JSON log lines with the ids of the work (tenant, thread, turn,
request, trace), request ids on HTTP answers, a Celery task's ids on its lines; and, on a
live web server and worker logging JSON, every line of a full turn parses, carries its ids,
and no planted secret appears."""

from __future__ import annotations

import http.client
import io
import json
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from celery import signals
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient, RequestFactory
from opentelemetry.sdk.trace import TracerProvider
from rest_framework.test import APIClient

from config import env
from config.launcher import background_server
from observability import logcontext, logs
from observability.logs import (
    REQUEST_ID_HEADER,
    JsonFormatter,
    LogIds,
    RequestIds,
    process_role_set,
    request_id_valid,
)
from tenancy.models import Role, Tenant
from tests.factories import make_api_key, make_tenant
from tests.reliability.platform import chat_bundle
from tests.support import current_database_url, server_warm_up
from tests.worker import private_queue, worker_start
from threads.tasks import drive_thread

Json = dict[str, Any]


@pytest.mark.parametrize(
    ("mode", "given", "expected"),
    [("development", None, "text"), ("production", None, "json"),
     ("development", "JSON", "json"), ("production", "text", "text")],
)  # fmt: skip
def test_log_format_is_text_in_development_and_json_in_production_by_default(
    monkeypatch: pytest.MonkeyPatch, mode: str, given: str | None, expected: str
) -> None:
    monkeypatch.setenv("PLATFORM_MODE", mode)
    if given is None:
        monkeypatch.delenv("LOG_FORMAT", raising=False)
    else:
        monkeypatch.setenv("LOG_FORMAT", given)

    assert env.log_format() == expected


def test_an_unknown_log_format_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOG_FORMAT", "xml")

    with pytest.raises(ImproperlyConfigured, match="LOG_FORMAT must be text or json, got 'xml'"):
        env.log_format()


@pytest.fixture
def lines() -> Iterator[Callable[[], list[Json]]]:
    """What the root logger writes through a handler configured as ``LOGGING``'s JSON
    console (the ids filter, the JSON formatter), parsed line by line."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(LogIds())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    role = logs._role  # a process role another test named (config.asgi names ``web``)
    logs.process_role_set(None)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logs.process_role_set(role)
    root.removeHandler(handler)
    root.setLevel(level)


def test_a_line_carries_the_bound_ids_and_none_when_nothing_is_bound(
    lines: Callable[[], list[Json]],
) -> None:
    log = logging.getLogger("tests.logs")
    with logcontext.bind(tenant_id="t-1", thread_id="th-1", turn_id="tu-1", request_id="r-1"):
        log.info("inside %s", "the block")
    log.warning("outside")

    inside, outside = lines()
    assert inside.keys() == {"timestamp", "level", "logger", "message", "tenant_id", "thread_id",
                             "turn_id", "request_id"}  # fmt: skip
    assert inside["timestamp"].endswith("Z")
    assert inside["timestamp"][10] == "T"
    assert (inside["level"], inside["logger"], inside["message"]) == (
        "INFO", "tests.logs", "inside the block"
    )  # fmt: skip
    assert (inside["tenant_id"], inside["thread_id"], inside["turn_id"], inside["request_id"]) == (
        "t-1", "th-1", "tu-1", "r-1"
    )  # fmt: skip
    assert outside == {"timestamp": outside["timestamp"], "level": "WARNING",
                       "logger": "tests.logs", "message": "outside"}  # fmt: skip


def test_a_line_carries_the_trace_and_span_of_the_active_span(
    lines: Callable[[], list[Json]],
) -> None:
    tracer = TracerProvider().get_tracer("tests.logs")
    log = logging.getLogger("tests.logs")
    with tracer.start_as_current_span("work") as span:
        log.info("traced")
    log.info("not traced")

    traced, untraced = lines()
    context = span.get_span_context()
    assert traced["trace_id"] == f"{context.trace_id:032x}"
    assert traced["span_id"] == f"{context.span_id:016x}"
    assert "trace_id" not in untraced
    assert "span_id" not in untraced


def test_extras_are_never_written_and_an_exception_is_text(
    lines: Callable[[], list[Json]],
) -> None:
    log = logging.getLogger("tests.logs")
    try:
        raise ValueError("broken")
    except ValueError:
        log.exception("failed", extra={"api_key": "sk-never-written"})

    (line,) = lines()
    assert "api_key" not in line
    assert "sk-never-written" not in json.dumps(line)
    assert line["exc_info"].startswith("Traceback")
    assert "ValueError: broken" in line["exc_info"]


def test_a_line_names_the_process_role_once_set(lines: Callable[[], list[Json]]) -> None:
    process_role_set("worker")
    try:
        logging.getLogger("tests.logs").info("working")
    finally:
        process_role_set(None)

    assert lines()[0]["role"] == "worker"


def test_a_task_run_carries_its_tenant_and_thread_and_drops_them_after(
    lines: Callable[[], list[Json]],
) -> None:
    """task_prerun and task_postrun, as the worker sends them (observability's ready()
    connected the receivers)."""
    log = logging.getLogger("tests.logs")
    signals.task_prerun.send(sender=drive_thread, task_id="task-1", task=drive_thread,
                             args=("th-9", "t-9"), kwargs={"attempt": 1})  # fmt: skip
    log.info("driving")
    signals.task_postrun.send(sender=drive_thread, task_id="task-1", task=drive_thread,
                              args=("th-9", "t-9"), kwargs={}, state="SUCCESS")  # fmt: skip
    log.info("after")

    driving, after = lines()
    assert (driving["tenant_id"], driving["thread_id"]) == ("t-9", "th-9")
    assert "tenant_id" not in after
    assert "thread_id" not in after


# Request ids ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "valid"),
    [("abc-123", True), ("x" * 128, True), ("x" * 129, False), ("", False),
     ("has space", False), ("new\nline", False), ("caf\u00e9", False)],
)  # fmt: skip
def test_a_request_id_is_1_to_128_printable_characters(value: str, valid: bool) -> None:
    assert request_id_valid(value) is valid


def _logging_view(request: HttpRequest) -> HttpResponse:
    logging.getLogger("tests.logs").info("serving")
    return HttpResponse("ok")


def test_the_middleware_echoes_a_valid_request_id_on_the_lines_and_the_answer(
    lines: Callable[[], list[Json]],
) -> None:
    request = RequestFactory().get("/", headers={REQUEST_ID_HEADER: "req-abc_1"})

    response = RequestIds(_logging_view)(request)

    assert response[REQUEST_ID_HEADER] == "req-abc_1"
    assert lines()[0]["request_id"] == "req-abc_1"
    assert logcontext.current() == {}


def test_the_middleware_makes_an_id_when_none_or_a_bad_one_is_given(
    lines: Callable[[], list[Json]],
) -> None:
    middleware = RequestIds(_logging_view)
    made = middleware(RequestFactory().get("/"))[REQUEST_ID_HEADER]
    too_long = RequestFactory().get("/", headers={REQUEST_ID_HEADER: "x" * 129})
    refused = middleware(too_long)[REQUEST_ID_HEADER]

    assert len(made) == 32
    assert int(made, 16) >= 0
    assert len(refused) == 32
    assert refused != made
    assert [line["request_id"] for line in lines()] == [made, refused]


@pytest.mark.django_db
def test_an_api_answer_carries_its_request_id_and_its_lines_the_tenant(
    client_for: Callable[..., APIClient], tenant: Tenant, lines: Callable[[], list[Json]]
) -> None:
    """The 404 line Django writes after the middleware returned names the request: it
    carries the request's id and, the API key being known, its tenant."""
    response = client_for(tenant, Role.READ_ONLY).get(
        f"/api/v1/threads/{uuid.uuid4()}", headers={REQUEST_ID_HEADER: "lost-thread-1"}
    )

    assert response.status_code == 404
    assert response[REQUEST_ID_HEADER] == "lost-thread-1"
    (line,) = [line for line in lines() if line["logger"] == "django.request"]
    assert line["level"] == "WARNING"
    assert line["message"].startswith("Not Found: /api/v1/threads/")
    assert (line["request_id"], line["tenant_id"]) == ("lost-thread-1", str(tenant.pk))


@pytest.mark.django_db
@pytest.mark.asyncio
async def test_the_middleware_serves_async_requests() -> None:
    response = await AsyncClient().get("/api/v1/me", headers={REQUEST_ID_HEADER: "async-1"})

    assert response.status_code == 401
    assert response[REQUEST_ID_HEADER] == "async-1"


# A full turn on live processes ------------------------------------------------------------

SECRETS = {
    "model": f"sk-model-{uuid.uuid4().hex}",
    "tenant env": f"env-secret-{uuid.uuid4().hex}",
    "credential": f"sk-cred-{uuid.uuid4().hex}",
    "operator key": f"sk-operator-{uuid.uuid4().hex}",
}
# The scripted primary model takes its key from the tenant's env and fails; its fallback
# (its key stored on it) asks for the time tool, then answers.
FAILING = [{"respond": {"error": "upstream refused the call", "status": 400}}]
ANSWERING = [
    {"when": {"last_tool": "current_time"}, "respond": {"text": "It is {last_tool_result}."}},
    {"respond": {"tool_calls": [{"name": "current_time", "arguments": {"timezone": "UTC"}}]}},
]  # fmt: skip


def _bundle() -> Json:
    bundle = chat_bundle(FAILING, tools=["current_time"])
    primary = bundle["models"][0]
    primary.update(api_key_env="MODEL_TOKEN", fallbacks=["keyed"])
    bundle["models"].append({"name": "keyed", "provider": "scripted", "model_id": "scripted",
                             "config": {"rules": ANSWERING}})  # fmt: skip
    return bundle


def _call(
    port: int, method: str, path: str, *, key: str, body: Json | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, Mapping[str, str], Json]:  # fmt: skip
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        sent = {"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                **(headers or {})}  # fmt: skip
        connection.request(method, path, body=None if body is None else json.dumps(body),
                           headers=sent)  # fmt: skip
        response = connection.getresponse()
        raw = response.read()
        answer = {name.lower(): value for name, value in response.getheaders()}
        return response.status, answer, json.loads(raw) if raw else {}
    finally:
        connection.close()


def _json_lines(path: Path) -> list[Json]:
    """Every line of the log at ``path``, each of which must be a JSON object with the four
    base fields."""
    parsed = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise AssertionError(f"{path.name}:{number} is not JSON: {line!r}") from None
        assert isinstance(record, dict), line
        assert {"timestamp", "level", "logger", "message"} <= record.keys(), line
        parsed.append(record)
    return parsed


@pytest.mark.django_db(transaction=True)
def test_a_full_turn_logs_json_lines_with_ids_and_no_secret(tmp_path: Path) -> None:
    tenant = make_tenant(f"logs-{uuid.uuid4().hex[:8]}")
    key = make_api_key(tenant, name="logs").secret
    environment = {"LOG_FORMAT": "json", "LOG_LEVEL": "DEBUG",
                   "OPENAI_API_KEY": SECRETS["operator key"], "PYTHONUNBUFFERED": "1"}  # fmt: skip
    worker = worker_start(queue=private_queue(), database_url=current_database_url(),
                          log_path=tmp_path / "worker.log", environment=environment)  # fmt: skip
    overrides = {"DATABASE_URL": current_database_url(), "CELERY_QUEUE": worker.queue,
                 **environment}  # fmt: skip
    try:
        with background_server(overrides, log_path=tmp_path / "web.log") as (port, _pid):
            server_warm_up(port, timeout=60)
            worker.wait_ready(timeout=60)
            thread_id = _run_turn(port, key)
            lost = _call(port, "GET", f"/api/v1/threads/{uuid.uuid4()}", key=key,
                         headers={REQUEST_ID_HEADER: "lost-1"})  # fmt: skip
            assert lost[0] == 404
            assert lost[1]["x-request-id"] == "lost-1"
            refused = _call(port, "GET", "/api/v1/me", key=key,
                            headers={REQUEST_ID_HEADER: "not valid"})  # fmt: skip
            assert len(refused[1]["x-request-id"]) == 32
            web_lines = _json_lines(tmp_path / "web.log")
            worker_lines = _json_lines(tmp_path / "worker.log")
    finally:
        worker.stop()

    for name in ("web.log", "worker.log"):
        text = (tmp_path / name).read_text()
        for what, secret in {**SECRETS, "API key": key}.items():
            assert secret not in text, f"the {what} secret is in {name}"

    assert {line.get("role") for line in web_lines} >= {"web"}
    (not_found,) = [line for line in web_lines if line.get("request_id") == "lost-1"]
    assert not_found["logger"] == "django.request"
    assert not_found["level"] == "WARNING"
    assert not_found["tenant_id"] == str(tenant.pk)
    requests = [line for line in web_lines if line["logger"] == "django.request"]
    assert requests
    assert all(line.get("request_id") for line in requests)

    assert "worker" in {line.get("role") for line in worker_lines}
    of_thread = [line for line in worker_lines if line.get("thread_id") == thread_id]
    assert of_thread, "no worker line carries the thread id"
    assert all(line.get("tenant_id") == str(tenant.pk) for line in of_thread)
    failed_call = [line for line in of_thread if "upstream refused" in line["message"]]
    assert failed_call, "the failed model call is not logged with the thread's ids"


def _run_turn(port: int, key: str) -> str:
    """Through the API: a credential, a tenant env secret, the bundle (its fallback model's
    key stored), a thread and a turn that waits for its end. The thread's id."""
    for method, path, body, expected in [
        ("POST", "/api/v1/credentials",
         {"name": "ops", "provider": "openai", "api_key": SECRETS["credential"]}, 201),
        ("PUT", "/api/v1/env/MODEL_TOKEN", {"value": SECRETS["tenant env"], "type": "secret"}, 200),
        ("POST", "/api/v1/bundles", _bundle(), 200),
        ("PATCH", "/api/v1/models/keyed", {"api_key": SECRETS["model"]}, 200),
    ]:  # fmt: skip
        status, _, answer = _call(port, method, path, key=key, body=body)
        assert status == expected, (method, path, status, answer)
    status, _, thread = _call(port, "POST", "/api/v1/threads", key=key, body={"agent": "chat"})
    assert status == 201, thread
    status, headers, waited = _call(
        port, "POST", f"/api/v1/threads/{thread['id']}/turns/wait", key=key,
        body={"input": {"content": "what time is it?"}}, headers={REQUEST_ID_HEADER: "turn-1"},
    )  # fmt: skip
    assert status == 200, waited
    assert waited["done"], waited
    assert headers["x-request-id"] == "turn-1"
    assert waited["turn"]["status"] == "completed", waited["turn"]
    thread_id: str = thread["id"]
    return thread_id
