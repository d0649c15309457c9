"""One contract every provider honours (STYLE 7): OpenAI and Anthropic through their real SDKs
against a loopback server speaking their wire format, and the scripted provider."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import pytest

from agents.providers.base import (
    AbortSignal,
    ContentDelta,
    ContentDone,
    Finish,
    LLMMessage,
    ModelSpec,
    ProviderAborted,
    ProviderRequest,
    ToolCall,
    ToolCallDone,
    ToolCallStart,
    ToolSpec,
    accumulate,
    is_retryable_status,
)
from agents.providers.chain import (
    ChainChunk,
    ProviderChainFailed,
    RetryStarted,
    generate_with_fallbacks,
)
from agents.providers.registry import provider_for
from agents.providers.scripted import Script
from tests.fakes.llm_servers import (
    ErrorReply,
    FakeAnthropicServer,
    FakeLLMServer,
    FakeOpenAIServer,
    Reply,
    ToolCallReply,
)

TEXT = "Hello, contract world!"
ARGUMENTS = {"query": "green tea", "limit": 3}
REQUEST = ProviderRequest(
    messages=(LLMMessage.system("You are terse."), LLMMessage.user("Say hello")),
    tools=(
        ToolSpec(
            name="lookup",
            description="Look something up",
            parameters={
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["query"],
            },
        ),
    ),
)


# What a test asks of a backend, whatever speaks for the model --------------------------------


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Calls:
    name: str
    arguments: dict[str, object]
    id: str = "call_1"


@dataclass(frozen=True)
class Fail:
    status: int
    message: str = "upstream exploded"


@dataclass(frozen=True)
class Slow:
    seconds: float


Step = Text | Calls | Fail | Slow


class Backend(Protocol):
    kind: str

    def spec(self, name: str, fallbacks: tuple[ModelSpec, ...] = ()) -> ModelSpec: ...

    def queue(self, name: str, *steps: Step) -> None: ...

    def calls_to(self, name: str) -> int: ...


@dataclass
class ServerBackend:
    """Every model of the test points at one loopback server; replies are used in call order."""

    kind: str
    server: FakeLLMServer

    def spec(self, name: str, fallbacks: tuple[ModelSpec, ...] = ()) -> ModelSpec:
        return ModelSpec(
            name=name,
            kind="openai" if self.kind == "openai" else "anthropic",
            model_id=f"{name}-model",
            base_url=self.server.base_url,
            api_key="test-key",
            fallbacks=fallbacks,
        )

    def queue(self, name: str, *steps: Step) -> None:
        for step in steps:
            if isinstance(step, Text):
                self.server.enqueue(Reply(text=step.text))
            elif isinstance(step, Calls):
                call = ToolCallReply(step.name, step.arguments, id=step.id)
                self.server.enqueue(Reply(tool_calls=(call,)))
            elif isinstance(step, Fail):
                self.server.enqueue(ErrorReply(step.status, step.message))
            else:
                self.server.enqueue(Reply(text="too late", delay_s=step.seconds))

    def calls_to(self, name: str) -> int:
        return sum(1 for r in self.server.requests if r.body.get("model") == f"{name}-model")


@dataclass
class ScriptBackend:
    kind: str = "scripted"
    scripts: dict[str, Script] = field(default_factory=dict)

    def script(self, name: str) -> Script:
        return self.scripts.setdefault(name, Script().streaming(chunk_size=4))

    def spec(self, name: str, fallbacks: tuple[ModelSpec, ...] = ()) -> ModelSpec:
        return self.script(name).spec(name, fallbacks=fallbacks)

    def queue(self, name: str, *steps: Step) -> None:
        script = self.script(name)
        for step in steps:
            if isinstance(step, Text):
                script.text(step.text)
            elif isinstance(step, Calls):
                script.tool_calls([{"name": step.name, "arguments": step.arguments, "id": step.id}])
            elif isinstance(step, Fail):
                script.error(
                    step.message, status=step.status, retryable=is_retryable_status(step.status)
                )
            else:
                script.text("too late", delay_ms=int(step.seconds * 1000))

    def calls_to(self, name: str) -> int:
        return len(self.script(name).requests)


@pytest.fixture(params=["openai", "anthropic", "scripted"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "scripted":
        yield ScriptBackend()
        return
    server_class = FakeOpenAIServer if request.param == "openai" else FakeAnthropicServer
    with server_class() as server:
        yield ServerBackend(request.param, server)


def _primary_with_backup(backend: Backend) -> tuple[ModelSpec, ModelSpec]:
    backup = backend.spec("backup")
    return backend.spec("primary", fallbacks=(backup,)), backup


# Plain answers ---------------------------------------------------------------------------------


def test_generate_returns_the_text_with_counted_usage(backend: Backend) -> None:
    backend.queue("primary", Text(TEXT))

    response = provider_for(backend.spec("primary")).generate(REQUEST)

    assert response.content == TEXT
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    assert response.provider == backend.kind
    usage = response.usage
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_stream_deltas_concatenate_to_the_text_and_finish_carries_usage(backend: Backend) -> None:
    backend.queue("primary", Text(TEXT))

    chunks = list(provider_for(backend.spec("primary")).stream(REQUEST))

    deltas = [chunk for chunk in chunks if isinstance(chunk, ContentDelta)]
    assert len(deltas) > 1
    assert "".join(delta.delta for delta in deltas) == TEXT
    assert chunks[: len(deltas) + 1] == [*deltas, ContentDone()]
    finish = chunks[-1]
    assert isinstance(finish, Finish)
    assert len(chunks) == len(deltas) + 2
    assert finish.finish_reason == "stop"
    assert finish.usage.completion_tokens > 0
    assert finish.usage.total_tokens == finish.usage.prompt_tokens + finish.usage.completion_tokens


def test_stream_and_generate_agree_on_the_answer(backend: Backend) -> None:
    backend.queue("primary", Text(TEXT), Text(TEXT))
    provider = provider_for(backend.spec("primary"))

    generated = provider.generate(REQUEST)
    streamed = accumulate(provider.stream(REQUEST))

    assert streamed.content == generated.content == TEXT
    assert streamed.finish_reason == generated.finish_reason == "stop"
    assert streamed.provider == generated.provider == backend.kind


# Tool calls ------------------------------------------------------------------------------------


def test_generated_tool_call_comes_back_with_parsed_arguments(backend: Backend) -> None:
    backend.queue("primary", Calls("lookup", ARGUMENTS))

    response = provider_for(backend.spec("primary")).generate(REQUEST)

    assert response.tool_calls == (ToolCall(id="call_1", name="lookup", arguments=ARGUMENTS),)
    assert response.finish_reason == "tool_calls"
    assert response.content == ""


def test_streamed_tool_call_starts_then_finishes_with_parsed_arguments(backend: Backend) -> None:
    backend.queue("primary", Calls("lookup", ARGUMENTS))

    chunks = list(provider_for(backend.spec("primary")).stream(REQUEST))

    assert chunks[:-1] == [
        ToolCallStart(id="call_1", name="lookup"),
        ToolCallDone(id="call_1", name="lookup", arguments=ARGUMENTS),
    ]
    finish = chunks[-1]
    assert isinstance(finish, Finish)
    assert finish.finish_reason == "tool_calls"


# Retries and fallbacks -------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_retryable_failure_is_retried_with_backoff_then_falls_back(
    backend: Backend, stream: bool
) -> None:
    primary, _ = _primary_with_backup(backend)
    backend.queue("primary", Fail(500), Fail(500))
    backend.queue("backup", Text("rescued"))
    delays: list[float] = []

    result = generate_with_fallbacks(primary, REQUEST, stream=stream, sleep=delays.append)

    assert delays == [1.0]
    assert result.response.content == "rescued"
    assert result.spec.name == "backup"
    assert [(a.model, a.attempt, a.status, a.retryable) for a in result.failed_attempts] == [
        ("primary", 1, 500, True),
        ("primary", 2, 500, True),
    ]
    assert "upstream exploded" in result.failed_attempts[0].error
    assert (backend.calls_to("primary"), backend.calls_to("backup")) == (2, 1)


def test_retry_of_the_same_model_can_succeed_without_falling_back(backend: Backend) -> None:
    primary, _ = _primary_with_backup(backend)
    backend.queue("primary", Fail(429, "slow down"), Text("second time lucky"))
    delays: list[float] = []

    result = generate_with_fallbacks(primary, REQUEST, stream=False, sleep=delays.append)

    assert result.response.content == "second time lucky"
    assert result.spec.name == "primary"
    assert [(a.attempt, a.status) for a in result.failed_attempts] == [(1, 429)]
    assert delays == [1.0]
    assert backend.calls_to("backup") == 0


def test_non_retryable_failure_is_not_retried_but_falls_back(backend: Backend) -> None:
    primary, _ = _primary_with_backup(backend)
    backend.queue("primary", Fail(400, "bad request"))
    backend.queue("backup", Text("rescued"))
    delays: list[float] = []

    result = generate_with_fallbacks(primary, REQUEST, stream=False, sleep=delays.append)

    assert delays == []
    assert result.response.content == "rescued"
    assert [(a.model, a.attempt, a.status, a.retryable) for a in result.failed_attempts] == [
        ("primary", 1, 400, False)
    ]
    assert (backend.calls_to("primary"), backend.calls_to("backup")) == (1, 1)


def test_every_model_failing_raises_an_error_listing_each_attempt(backend: Backend) -> None:
    primary, _ = _primary_with_backup(backend)
    backend.queue("primary", Fail(503), Fail(503))
    backend.queue("backup", Fail(500), Fail(500))
    delays: list[float] = []

    with pytest.raises(ProviderChainFailed) as failure:
        generate_with_fallbacks(primary, REQUEST, stream=False, sleep=delays.append)

    assert [(a.model, a.attempt) for a in failure.value.attempts] == [
        ("primary", 1),
        ("primary", 2),
        ("backup", 1),
        ("backup", 2),
    ]
    assert "primary attempt 2" in failure.value.message
    assert "backup attempt 1" in failure.value.message
    assert delays == [1.0, 1.0]


def test_streamed_chain_relays_every_chunk_as_it_arrives(backend: Backend) -> None:
    backend.queue("primary", Text(TEXT))
    seen: list[ChainChunk] = []

    result = generate_with_fallbacks(
        backend.spec("primary"), REQUEST, stream=True, on_chunk=seen.append
    )

    relayed = [chunk for chunk in seen if not isinstance(chunk, RetryStarted)]
    assert relayed == seen
    assert accumulate(relayed) == result.response
    assert result.response.content == TEXT


# Aborting --------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_abort_during_a_slow_first_byte_raises_promptly_without_fallback(
    backend: Backend, stream: bool
) -> None:
    primary, _ = _primary_with_backup(backend)
    backend.queue("primary", Slow(5.0))
    backend.queue("backup", Text("must not be used"))
    abort = AbortSignal()
    timer = threading.Timer(0.1, abort.set)
    timer.start()
    started = time.monotonic()

    with pytest.raises(ProviderAborted):
        generate_with_fallbacks(primary, REQUEST, stream=stream, abort=abort)

    assert time.monotonic() - started < 1.0
    timer.join()
    assert backend.calls_to("primary") == 1
    assert backend.calls_to("backup") == 0
