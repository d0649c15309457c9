"""The Messages adapter, asserted on what the real SDK sent to the loopback server."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import openai
import pytest

from agents.providers.anthropic_provider import AnthropicProvider
from agents.providers.base import (
    ContentDelta,
    ContentDone,
    Finish,
    ImagePart,
    LLMMessage,
    ModelCapabilities,
    ModelSpec,
    ProviderError,
    ProviderRequest,
    ReasoningConfig,
    ReasoningDelta,
    ReasoningDone,
    ToolCall,
    ToolSpec,
    Usage,
    accumulate,
)
from agents.providers.openai_provider import OpenAIProvider
from tests.fakes.llm_servers import ErrorReply, FakeAnthropicServer, Reply, ToolCallReply

HELLO = ProviderRequest(messages=(LLMMessage.user("hello"),))
LOOKUP = ToolSpec("lookup", "Look up", {"type": "object", "properties": {"q": {"type": "string"}}})


def _provider(server: FakeAnthropicServer, **overrides: Any) -> AnthropicProvider:
    fields: dict[str, Any] = {
        "name": "claude",
        "kind": "anthropic",
        "model_id": "claude-test",
        "base_url": server.base_url,
        "api_key": "sk-ant-test",
    }
    return AnthropicProvider(ModelSpec(**(fields | overrides)))


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def test_system_prompt_is_separated_from_the_messages(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.enqueue(Reply(text="ok"))
    request = ProviderRequest(
        messages=(
            LLMMessage.system("You are a cat."),
            LLMMessage.system("Answer in one word."),
            LLMMessage.user("Who are you?"),
        )
    )

    _provider(anthropic_server).generate(request)

    body = anthropic_server.last_body
    assert body["system"] == "You are a cat.\n\nAnswer in one word."
    assert body["messages"] == [{"role": "user", "content": [_text("Who are you?")]}]


def test_tool_calls_and_results_become_tool_use_and_tool_result_blocks(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.enqueue(Reply(text="Oslo is sunny, Bergen rainy."))
    calls = [
        ToolCall(id="toolu_1", name="weather", arguments={"city": "Oslo"}),
        ToolCall(id="toolu_2", name="weather", arguments={"city": "Bergen"}),
    ]
    request = ProviderRequest(
        messages=(
            LLMMessage.user("Weather in Oslo and Bergen?"),
            LLMMessage.assistant("Checking both.", calls),
            LLMMessage.tool(tool_call_id="toolu_1", name="weather", content="sunny"),
            LLMMessage.tool(tool_call_id="toolu_2", name="weather", content="rainy"),
        )
    )

    _provider(anthropic_server).generate(request)

    assert anthropic_server.last_body["messages"] == [
        {"role": "user", "content": [_text("Weather in Oslo and Bergen?")]},
        {
            "role": "assistant",
            "content": [
                _text("Checking both."),
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "weather",
                    "input": {"city": "Bergen"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "rainy"},
            ],
        },
    ]


def test_consecutive_same_role_messages_are_merged_with_tool_results_first(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.enqueue(Reply(text="ok"))
    call = ToolCall(id="toolu_1", name="search", arguments={})
    request = ProviderRequest(
        messages=(
            LLMMessage.user("first"),
            LLMMessage.user("second"),
            LLMMessage.assistant(None, [call]),
            LLMMessage.user("by the way"),
            LLMMessage.tool(tool_call_id="toolu_1", name="search", content="found"),
            LLMMessage.assistant("one"),
            LLMMessage.assistant("two"),
        )
    )

    _provider(anthropic_server).generate(request)

    assert anthropic_server.last_body["messages"] == [
        {"role": "user", "content": [_text("first"), _text("second")]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "found"},
                _text("by the way"),
            ],
        },
        {"role": "assistant", "content": [_text("one"), _text("two")]},
    ]


def test_a_later_system_message_is_relayed_in_place_as_user_text(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.enqueue(Reply(text="ok"))
    request = ProviderRequest(
        messages=(
            LLMMessage.system("Be kind."),
            LLMMessage.user("hi"),
            LLMMessage.assistant("hello"),
            LLMMessage.system("Execution stopped by user"),
            LLMMessage.user("go on"),
        )
    )

    _provider(anthropic_server).generate(request)

    body = anthropic_server.last_body
    assert body["system"] == "Be kind."
    assert body["messages"][-1] == {
        "role": "user",
        "content": [_text("[system] Execution stopped by user"), _text("go on")],
    }


def test_empty_messages_are_dropped(anthropic_server: FakeAnthropicServer) -> None:
    anthropic_server.enqueue(Reply(text="ok"))
    request = ProviderRequest(
        messages=(LLMMessage.user("hi"), LLMMessage.assistant("  "), LLMMessage.user("again"))
    )

    _provider(anthropic_server).generate(request)

    assert anthropic_server.last_body["messages"] == [
        {"role": "user", "content": [_text("hi"), _text("again")]}
    ]


def test_image_parts_become_base64_and_url_image_blocks(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.enqueue(Reply(text="a cat"))
    message = LLMMessage.user(
        "What is this?",
        ImagePart(mime_type="image/png", data="iVBORw0KGgo="),
        ImagePart(mime_type="image/jpeg", url="https://example.test/cat.jpg"),
    )

    _provider(anthropic_server).generate(ProviderRequest(messages=(message,)))

    assert anthropic_server.last_body["messages"][0]["content"] == [
        _text("What is this?"),
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.test/cat.jpg"}},
    ]


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        ("auto", None, {"type": "auto"}),
        ("required", None, {"type": "any"}),
        ("lookup", None, {"type": "tool", "name": "lookup"}),
        ("none", False, {"type": "none"}),
        ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}),
    ],
)
def test_tool_choice_is_translated(
    anthropic_server: FakeAnthropicServer,
    choice: str,
    parallel: bool | None,
    expected: dict[str, Any],
) -> None:
    anthropic_server.enqueue(Reply(text="ok"))
    request = ProviderRequest(
        messages=HELLO.messages, tools=(LOOKUP,), tool_choice=choice, parallel_tool_calls=parallel
    )

    _provider(anthropic_server).generate(request)

    body = anthropic_server.last_body
    assert body["tool_choice"] == expected
    assert body["tools"] == [
        {
            "name": "lookup",
            "description": "Look up",
            "input_schema": {
                "type": "object",
                "properties": {"q": {"type": "string"}},
                "additionalProperties": False,
            },
        }
    ]


@pytest.mark.parametrize(
    ("requested", "capability", "expected"),
    [(None, None, 4096), (None, 1000, 1000), (300, 1000, 300)],
)
def test_max_tokens_comes_from_the_request_then_the_model_then_4096(
    anthropic_server: FakeAnthropicServer,
    requested: int | None,
    capability: int | None,
    expected: int,
) -> None:
    anthropic_server.enqueue(Reply(text="ok"))
    provider = _provider(
        anthropic_server, capabilities=ModelCapabilities(max_output_tokens=capability)
    )

    provider.generate(ProviderRequest(messages=HELLO.messages, max_output_tokens=requested))

    assert anthropic_server.last_body["max_tokens"] == expected


def test_thinking_budget_comes_from_reasoning_max_tokens_and_lifts_max_tokens(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.enqueue(Reply(text="ok"))
    request = ProviderRequest(
        messages=HELLO.messages, max_output_tokens=2000, reasoning=ReasoningConfig(max_tokens=8000)
    )

    _provider(anthropic_server).generate(request)

    body = anthropic_server.last_body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8000}
    assert body["max_tokens"] == 9024


def test_provider_options_are_merged_into_the_body(anthropic_server: FakeAnthropicServer) -> None:
    anthropic_server.enqueue(Reply(text="ok"))
    provider = _provider(anthropic_server, config={"provider_options": {"temperature": 0.1}})

    provider.generate(ProviderRequest(messages=HELLO.messages, provider_options={"top_k": 5}))

    assert (anthropic_server.last_body["temperature"], anthropic_server.last_body["top_k"]) == (
        0.1,
        5,
    )


def test_the_spec_api_key_is_the_one_sent(anthropic_server: FakeAnthropicServer) -> None:
    anthropic_server.enqueue(Reply(text="ok"))

    _provider(anthropic_server).generate(HELLO)

    # SDK 2.x sends the key as a bearer token; older ones used x-api-key.
    headers = anthropic_server.requests[0].headers
    sent = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
    assert sent == "sk-ant-test"


def test_missing_api_key_fails_clearly_before_any_request(
    anthropic_server: FakeAnthropicServer,
) -> None:
    with pytest.raises(ProviderError, match="has no API key"):
        _provider(anthropic_server, api_key=None).generate(HELLO)

    assert anthropic_server.requests == []


def test_thinking_text_and_cache_usage_are_read_from_json_and_stream(
    anthropic_server: FakeAnthropicServer,
) -> None:
    reply = Reply(
        text="42",
        reasoning="ponder",
        prompt_tokens=100,
        completion_tokens=30,
        cached_tokens=60,
        reasoning_tokens=12,
    )
    anthropic_server.enqueue(reply, reply)
    provider = _provider(anthropic_server)

    generated = provider.generate(HELLO)
    chunks = list(provider.stream(HELLO))

    expected = Usage(100, 30, 130, reasoning_tokens=12, cached_tokens=60)
    assert generated.reasoning == "ponder"
    assert generated.usage == expected
    assert chunks == [
        ReasoningDelta("pond"),
        ReasoningDelta("er"),
        ReasoningDone(),
        ContentDelta("42"),
        ContentDone(),
        Finish("stop", expected, model_id="claude-test", provider="anthropic"),
    ]


@pytest.mark.parametrize(
    ("wire", "mapped"),
    [("end_turn", "stop"), ("max_tokens", "length"), ("refusal", "content_filter")],
)
def test_stop_reasons_are_mapped(
    anthropic_server: FakeAnthropicServer, wire: str, mapped: str
) -> None:
    anthropic_server.enqueue(
        Reply(text="cut", finish_reason=wire), Reply(text="cut", finish_reason=wire)
    )
    provider = _provider(anthropic_server)

    assert provider.generate(HELLO).finish_reason == mapped
    assert accumulate(provider.stream(HELLO)).finish_reason == mapped


def test_malformed_streamed_tool_input_is_a_non_retryable_error_naming_the_tool(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.enqueue(Reply(tool_calls=(ToolCallReply("lookup", '{"q": '),)))

    with pytest.raises(ProviderError, match="tool 'lookup'") as failure:
        accumulate(_provider(anthropic_server).stream(HELLO))

    assert failure.value.retryable is False


@pytest.mark.parametrize(
    ("status", "retryable"), [(400, False), (401, False), (403, False), (429, True), (529, True)]
)
def test_http_errors_carry_status_and_retryability(
    anthropic_server: FakeAnthropicServer, status: int, retryable: bool
) -> None:
    anthropic_server.enqueue(ErrorReply(status, "try later", error_type="overloaded_error"))

    with pytest.raises(ProviderError) as failure:
        _provider(anthropic_server).generate(HELLO)

    assert failure.value.http_status == status
    assert failure.value.retryable is retryable
    assert "overloaded_error: try later" in failure.value.message


def test_a_prompt_over_the_context_window_is_named_and_not_retried(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.enqueue(
        ErrorReply(400, "prompt is too long: 215000 tokens > 200000 maximum",
                   error_type="invalid_request_error")
    )  # fmt: skip

    with pytest.raises(ProviderError) as failure:
        _provider(anthropic_server).generate(HELLO)

    assert (failure.value.code, failure.value.retryable) == ("context_length_exceeded", False)
    assert "prompt is too long" in failure.value.message


@pytest.mark.parametrize("sdk_name", ["openai", "anthropic"])
def test_a_timeout_is_reported_as_a_retryable_timeout(sdk_name: str) -> None:
    sdk = {"openai": openai, "anthropic": anthropic}[sdk_name]
    provider_class = {"openai": OpenAIProvider, "anthropic": AnthropicProvider}[sdk_name]
    spec = ModelSpec(name="m", kind=sdk_name, model_id="x", api_key="k")  # type: ignore[arg-type]
    error = sdk.APITimeoutError(request=httpx2.Request("POST", "http://x"))

    translated = provider_class(spec)._translate(error)

    endpoint = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
    assert translated.message == (
        f"{sdk_name} model 'm' (x) could not be reached at {endpoint[sdk_name]} (timed out): "
        "check the network (the model has no base_url: the provider's official endpoint)"
    )
    assert translated.retryable is True
