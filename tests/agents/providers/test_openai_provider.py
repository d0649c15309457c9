"""The Chat Completions adapter, asserted on what the real SDK sent to the loopback server."""

from __future__ import annotations

from typing import Any

import pytest

from agents.providers.base import (
    ContentDelta,
    Finish,
    ImagePart,
    LLMMessage,
    ModelSpec,
    ProviderError,
    ProviderRequest,
    ReasoningConfig,
    ReasoningDelta,
    ReasoningDone,
    StreamChunk,
    ToolCall,
    ToolSpec,
    Usage,
    accumulate,
)
from agents.providers.openai_provider import OpenAIProvider
from tests.fakes.llm_servers import ErrorReply, FakeOpenAIServer, Reply, ToolCallReply

HELLO = ProviderRequest(messages=(LLMMessage.user("hello"),))
LOOKUP = ToolSpec("lookup", "Look up", {"type": "object", "properties": {"q": {"type": "string"}}})


def _provider(server: FakeOpenAIServer, **overrides: Any) -> OpenAIProvider:
    fields: dict[str, Any] = {
        "name": "gpt",
        "kind": "openai",
        "model_id": "gpt-test",
        "base_url": server.base_url,
        "api_key": "sk-test",
    }
    return OpenAIProvider(ModelSpec(**(fields | overrides)))


def test_image_parts_are_sent_as_image_url_data_urls(openai_server: FakeOpenAIServer) -> None:
    openai_server.enqueue(Reply(text="a cat"))
    message = LLMMessage.user(
        "What is this?",
        ImagePart(mime_type="image/png", data="iVBORw0KGgo="),
        ImagePart(mime_type="image/jpeg", url="https://example.test/cat.jpg"),
    )

    _provider(openai_server).generate(ProviderRequest(messages=(message,)))

    assert openai_server.last_body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.test/cat.jpg"}},
            ],
        }
    ]


def test_history_with_tool_calls_and_results_is_sent_in_chat_completions_shape(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.enqueue(Reply(text="It is sunny."))
    call = ToolCall(id="call_9", name="weather", arguments={"city": "Oslo"})
    request = ProviderRequest(
        messages=(
            LLMMessage.system("Be brief."),
            LLMMessage.user("Weather in Oslo?"),
            LLMMessage.assistant(None, [call]),
            LLMMessage.tool(tool_call_id="call_9", name="weather", content="sunny"),
        )
    )

    _provider(openai_server).generate(request)

    assert openai_server.last_body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "sunny"},
    ]


def test_tools_are_shaped_and_a_named_tool_choice_forces_that_function(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.enqueue(Reply(tool_calls=(ToolCallReply("lookup", {"q": "x"}),)))
    request = ProviderRequest(
        messages=HELLO.messages, tools=(LOOKUP,), tool_choice="lookup", parallel_tool_calls=False
    )

    _provider(openai_server).generate(request)

    body = openai_server.last_body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look up",
                "parameters": {
                    "type": "object",
                    "properties": {"q": {"type": "string"}},
                    "additionalProperties": False,
                },
            },
        }
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert body["parallel_tool_calls"] is False


def test_tool_options_are_left_out_without_tools(openai_server: FakeOpenAIServer) -> None:
    openai_server.enqueue(Reply(text="hi"))

    _provider(openai_server).generate(
        ProviderRequest(messages=HELLO.messages, tool_choice="required", parallel_tool_calls=True)
    )

    assert {"tools", "tool_choice", "parallel_tool_calls"}.isdisjoint(openai_server.last_body)


def test_reasoning_effort_output_limit_and_provider_options_reach_the_body(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.enqueue(Reply(text="hi"))
    provider = _provider(
        openai_server, config={"provider_options": {"temperature": 0.2, "top_p": 0.5}}
    )
    request = ProviderRequest(
        messages=HELLO.messages,
        max_output_tokens=256,
        reasoning=ReasoningConfig(effort="high"),
        provider_options={"temperature": 0.7},
    )

    provider.generate(request)

    body = openai_server.last_body
    assert body["reasoning_effort"] == "high"
    assert body["max_completion_tokens"] == 256
    assert (body["temperature"], body["top_p"]) == (0.7, 0.5)


def test_max_tokens_param_can_use_the_older_name(openai_server: FakeOpenAIServer) -> None:
    openai_server.enqueue(Reply(text="hi"))

    _provider(openai_server, config={"max_tokens_param": "max_tokens"}).generate(
        ProviderRequest(messages=HELLO.messages, max_output_tokens=64)
    )

    assert openai_server.last_body["max_tokens"] == 64
    assert "max_completion_tokens" not in openai_server.last_body


def test_the_api_key_is_sent_as_a_bearer_token(openai_server: FakeOpenAIServer) -> None:
    openai_server.enqueue(Reply(text="hi"))

    _provider(openai_server).generate(HELLO)

    assert openai_server.requests[0].headers["authorization"] == "Bearer sk-test"


def test_missing_api_key_fails_clearly_before_any_request(openai_server: FakeOpenAIServer) -> None:
    with pytest.raises(ProviderError, match="has no API key") as failure:
        _provider(openai_server, api_key=None).generate(HELLO)

    assert failure.value.retryable is False
    assert openai_server.requests == []


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_malformed_tool_arguments_are_a_non_retryable_error_naming_the_tool(
    openai_server: FakeOpenAIServer, stream: bool
) -> None:
    openai_server.enqueue(Reply(tool_calls=(ToolCallReply("lookup", '{"q": "unterminated'),)))
    provider = _provider(openai_server)

    with pytest.raises(
        ProviderError, match="malformed JSON arguments for tool 'lookup'"
    ) as failure:
        accumulate(provider.stream(HELLO)) if stream else provider.generate(HELLO)

    assert failure.value.retryable is False


def test_streamed_fragments_of_several_tool_calls_are_assembled_per_call(
    openai_server: FakeOpenAIServer,
) -> None:
    calls = (
        ToolCallReply("lookup", {"q": "first query"}, id="call_a"),
        ToolCallReply("lookup", {"q": "second"}, id="call_b"),
    )
    openai_server.enqueue(Reply(tool_calls=calls, chunk_size=3))

    response = accumulate(_provider(openai_server).stream(HELLO))

    assert response.tool_calls == (
        ToolCall(id="call_a", name="lookup", arguments={"q": "first query"}),
        ToolCall(id="call_b", name="lookup", arguments={"q": "second"}),
    )


def test_usage_details_and_reasoning_text_are_read(openai_server: FakeOpenAIServer) -> None:
    reply = Reply(
        text="42",
        reasoning="think first",
        prompt_tokens=100,
        completion_tokens=30,
        cached_tokens=60,
        reasoning_tokens=20,
    )
    openai_server.enqueue(reply, reply)
    provider = _provider(openai_server)

    generated = provider.generate(HELLO)
    chunks = list(provider.stream(HELLO))

    expected = Usage(100, 30, 130, reasoning_tokens=20, cached_tokens=60)
    assert generated.usage == expected
    assert generated.reasoning == "think first"
    assert chunks[:4] == [
        ReasoningDelta("thin"),
        ReasoningDelta("k fi"),
        ReasoningDelta("rst"),
        ReasoningDone(),
    ]
    assert chunks[4] == ContentDelta("42")
    assert chunks[-1] == Finish("stop", expected, model_id="gpt-test", provider="openai")


@pytest.mark.parametrize(
    ("wire", "mapped"), [("length", "length"), ("content_filter", "content_filter")]
)
def test_finish_reasons_are_mapped(openai_server: FakeOpenAIServer, wire: str, mapped: str) -> None:
    openai_server.enqueue(Reply(text="cut", finish_reason=wire))

    assert _provider(openai_server).generate(HELLO).finish_reason == mapped


@pytest.mark.parametrize(
    ("status", "retryable"), [(401, False), (404, False), (422, False), (408, True), (429, True)]
)
def test_http_errors_carry_status_and_retryability(
    openai_server: FakeOpenAIServer, status: int, retryable: bool
) -> None:
    openai_server.enqueue(ErrorReply(status, "nope", error_type="invalid_request_error"))

    with pytest.raises(ProviderError) as failure:
        _provider(openai_server).generate(HELLO)

    assert failure.value.http_status == status
    assert failure.value.retryable is retryable
    assert "invalid_request_error: nope" in failure.value.message


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("This model's maximum context length is 128000 tokens.", "context_length_exceeded"),
        ("This model's maximum context length is 4096 tokens.", None),  # a compatible server
    ],
)
def test_a_request_over_the_context_window_is_named_and_not_retried(
    openai_server: FakeOpenAIServer, message: str, code: str | None
) -> None:
    openai_server.enqueue(ErrorReply(400, message, error_type="invalid_request_error", code=code))

    with pytest.raises(ProviderError) as failure:
        _provider(openai_server).generate(HELLO)

    assert failure.value.code == "context_length_exceeded"
    assert failure.value.retryable is False
    assert message in failure.value.message


def test_another_bad_request_keeps_the_provider_error_code(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.enqueue(ErrorReply(400, "unknown parameter", error_type="invalid_request_error"))

    with pytest.raises(ProviderError) as failure:
        _provider(openai_server).generate(HELLO)

    assert failure.value.code == "provider_error"


def test_connection_dropped_mid_stream_is_a_retryable_error(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.enqueue(Reply(text="this will be cut off", disconnect_after=3))
    seen: list[StreamChunk] = []
    chunks = _provider(openai_server).stream(HELLO)

    with pytest.raises(ProviderError) as failure:
        seen.extend(chunks)

    assert seen == [ContentDelta("this"), ContentDelta(" wil")]
    assert failure.value.retryable is True
    assert failure.value.http_status is None
