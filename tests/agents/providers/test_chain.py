"""Retries and fallbacks beyond the shared contract: markers, backoff growth, odd providers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from agents.providers.base import (
    AbortSignal,
    ContentDelta,
    ContentDone,
    Finish,
    LLMMessage,
    ModelCapabilities,
    ModelSpec,
    Provider,
    ProviderAborted,
    ProviderRequest,
    ProviderResponse,
    StreamChunk,
    accumulate,
)
from agents.providers.chain import (
    ChainChunk,
    ProviderChainFailed,
    RetryStarted,
    generate_with_fallbacks,
)
from agents.providers.registry import provider_for
from agents.providers.scripted import Script
from tests.fakes.llm_servers import FakeOpenAIServer, Reply

HELLO = ProviderRequest(messages=(LLMMessage.user("hello"),))


def test_a_stream_cut_mid_way_is_retried_after_a_retry_marker(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.enqueue(
        Reply(text="this answer is cut", disconnect_after=3), Reply(text="whole answer")
    )
    spec = ModelSpec(
        name="gpt", kind="openai", model_id="gpt", base_url=openai_server.base_url, api_key="k"
    )
    seen: list[ChainChunk] = []

    result = generate_with_fallbacks(
        spec, HELLO, stream=True, on_chunk=seen.append, sleep=lambda _: None
    )

    marker = next(index for index, chunk in enumerate(seen) if isinstance(chunk, RetryStarted))
    assert seen[:marker] == [ContentDelta("this"), ContentDelta(" ans")]
    retry = seen[marker]
    assert isinstance(retry, RetryStarted)
    assert (retry.model, retry.attempt) == ("gpt", 2)
    assert "could not be reached" in retry.after_error
    after = [chunk for chunk in seen[marker + 1 :] if not isinstance(chunk, RetryStarted)]
    assert accumulate(after) == result.response
    assert result.response.content == "whole answer"
    assert [attempt.attempt for attempt in result.failed_attempts] == [1]


def test_backoff_doubles_with_each_attempt() -> None:
    script = Script().error("down").error("down").error("down").text("up")
    delays: list[float] = []

    result = generate_with_fallbacks(
        script.spec("flaky"),
        HELLO,
        stream=False,
        sleep=delays.append,
        base_delay_s=0.5,
        attempts_per_model=4,
    )

    assert delays == [0.5, 1.0, 2.0]
    assert result.response.content == "up"


def test_no_retry_marker_is_emitted_when_the_first_attempt_succeeds() -> None:
    seen: list[ChainChunk] = []

    generate_with_fallbacks(Script().text("fine").spec(), HELLO, stream=True, on_chunk=seen.append)

    assert not any(isinstance(chunk, RetryStarted) for chunk in seen)


def test_a_model_that_cannot_stream_is_called_once_and_replayed_as_chunks() -> None:
    script = Script().text("not streamed")
    spec = ModelSpec(
        name="batch",
        kind="scripted",
        model_id="batch",
        config={"script": script},
        capabilities=ModelCapabilities(streaming=False),
    )
    seen: list[ChainChunk] = []

    result = generate_with_fallbacks(spec, HELLO, stream=True, on_chunk=seen.append)

    assert seen[:2] == [ContentDelta("not streamed"), ContentDone()]
    assert isinstance(seen[-1], Finish)
    assert result.response.content == "not streamed"


def test_an_invalid_scripted_config_falls_back_to_the_next_model() -> None:
    backup = Script().text("backup answered").spec("backup")
    broken = ModelSpec(
        name="broken", kind="scripted", model_id="broken", config={"rules": "nope"},
        fallbacks=(backup,),
    )  # fmt: skip
    delays: list[float] = []

    result = generate_with_fallbacks(broken, HELLO, stream=False, sleep=delays.append)

    assert result.response.content == "backup answered"
    assert [(a.model, a.code, a.retryable) for a in result.failed_attempts] == [
        ("broken", "scripted_config_invalid", False)
    ]
    assert delays == []


class _AbortingProvider:
    calls = 0

    def generate(
        self, request: ProviderRequest, *, abort: AbortSignal | None = None
    ) -> ProviderResponse:
        type(self).calls += 1
        raise ProviderAborted()

    def stream(
        self, request: ProviderRequest, *, abort: AbortSignal | None = None
    ) -> Iterator[StreamChunk]:
        raise ProviderAborted()


def test_an_aborted_call_is_neither_retried_nor_falls_back() -> None:
    backup = Script().text("never").spec("backup")
    primary = Script().spec("primary", fallbacks=[backup])

    def factory(spec: ModelSpec) -> Provider:
        return _AbortingProvider() if spec.name == "primary" else provider_for(spec)

    with pytest.raises(ProviderAborted):
        generate_with_fallbacks(primary, HELLO, stream=False, provider_factory=factory)

    assert _AbortingProvider.calls == 1
    assert backup.config["script"].remaining == 1


def test_an_abort_during_backoff_stops_the_chain() -> None:
    script = Script().error("down").text("would have worked")
    abort = AbortSignal()

    with pytest.raises(ProviderAborted):
        generate_with_fallbacks(
            script.spec(), HELLO, stream=False, abort=abort, sleep=lambda _: abort.set()
        )

    assert script.remaining == 1


def test_the_default_pause_is_cut_short_by_the_abort_signal() -> None:
    script = Script().error("down").text("late")
    abort = AbortSignal()
    threading.Timer(0.1, abort.set).start()
    started = time.monotonic()

    with pytest.raises(ProviderAborted):
        generate_with_fallbacks(script.spec(), HELLO, stream=False, abort=abort, base_delay_s=60)

    assert time.monotonic() - started < 5
    assert script.remaining == 1


def test_chain_failure_reports_the_last_status_and_retryability() -> None:
    script = Script().error("gone", status=404, retryable=False)

    with pytest.raises(ProviderChainFailed) as failure:
        generate_with_fallbacks(script.spec("only"), HELLO, stream=False)

    assert failure.value.http_status == 404
    assert failure.value.retryable is False
    assert failure.value.message == (
        "model 'only' and its fallbacks failed (1 model(s), 1 attempt(s)): only attempt 1: gone"
    )
