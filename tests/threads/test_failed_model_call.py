"""A turn of the demo assistant whose model call fails (the local-model path of `make run`):
the turn fails naming the URL and the setting to check, and leaves no empty assistant message;
text streamed before the failure is kept on the failed row."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from pytest_django.fixtures import Settings

from tenancy.models import Tenant
from tests.agents.test_demo_reseed import _seed
from tests.factories import make_tenant
from tests.fakes.llm_servers import ErrorReply, FakeOpenAIServer, Reply
from threads.models import Event, Message, Thread, Turn
from threads.runtime.driver import thread_drive
from threads.runtime.engine import Runtime
from threads.runtime.lifecycle import thread_open
from threads.services.inbox import message_queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo() -> Tenant:
    return make_tenant("demo")


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def _turn(demo: Tenant) -> tuple[Thread, Turn]:
    thread = thread_open(tenant=demo, agent_name="assistant")
    message_queue(thread=thread, role="user", content="hello")
    thread_drive(thread_id=thread.pk, runtime=Runtime(retry_base_delay_s=0))
    return thread, Turn.objects.get(thread=thread)


def _assistant_rows(thread: Thread) -> list[tuple[str | None, str]]:
    return list(
        Message.objects.filter(thread=thread, role="assistant").values_list("content", "status")
    )


def test_an_unreachable_local_server_fails_the_turn_naming_the_url_and_openai_base_url(
    demo: Tenant, settings: Settings
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"  # closed when the block ends
    _seed(settings, OPENAI_BASE_URL=url)

    thread, turn = _turn(demo)

    reason = (
        f"could not be reached at {url} (connection refused): check OPENAI_BASE_URL or the "
        "model's base_url"
    )
    step = Message.objects.get(thread=thread, role="system").content or ""
    assert (turn.status, turn.outcome) == ("failed", "step_error")
    assert reason in turn.error
    assert step.startswith("The step failed: ")
    assert reason in step
    assert "local-server" not in turn.error  # the placeholder key is never shown
    assert _assistant_rows(thread) == []
    created = Event.objects.filter(thread=thread, type="message.created")
    deleted = Event.objects.filter(thread=thread, type="message.deleted")
    pending_id = next(e.payload["id"] for e in created if e.payload["role"] == "assistant")
    assert [e.payload["id"] for e in deleted] == [pending_id]  # followers drop the bubble


def test_an_unknown_local_model_fails_the_turn_naming_openai_model(
    demo: Tenant, settings: Settings, server: FakeOpenAIServer
) -> None:
    _seed(settings, OPENAI_BASE_URL=server.base_url, OPENAI_MODEL="local-llm")
    server.enqueue(
        ErrorReply(404, "model 'local-llm' not found", error_type="invalid_request_error")
    )

    thread, turn = _turn(demo)

    assert turn.status == "failed"
    assert (
        f"at {server.base_url} answered HTTP 404: invalid_request_error: model 'local-llm' not "
        "found: check the model's model_id (the demo model's comes from OPENAI_MODEL)"
    ) in turn.error
    assert _assistant_rows(thread) == []


def test_a_refused_key_fails_the_turn_naming_openai_api_key(
    demo: Tenant, settings: Settings, server: FakeOpenAIServer
) -> None:
    _seed(settings, OPENAI_BASE_URL=server.base_url)
    server.enqueue(ErrorReply(401, "bad key", error_type="invalid_request_error"))

    thread, turn = _turn(demo)

    assert turn.error.endswith("check OPENAI_API_KEY (the platform credential's key)")
    assert _assistant_rows(thread) == []


def test_text_streamed_before_the_failure_stays_on_the_failed_row(
    demo: Tenant, settings: Settings, server: FakeOpenAIServer
) -> None:
    _seed(settings, OPENAI_BASE_URL=server.base_url)
    # Each attempt streams the role chunk and two pieces of text, then the connection drops.
    broken = Reply(text="Half an answer", disconnect_after=3)
    server.enqueue(broken, broken)

    thread, turn = _turn(demo)

    (row,) = Message.objects.filter(thread=thread, role="assistant")
    assert turn.status == "failed"
    assert (row.content, row.status) == ("Half an ", "failed")  # the last attempt's text only
    assert row.metadata["error"] == turn.error
