"""The neutral types: prices, folding streams, the abort signal, message invariants."""

from __future__ import annotations

import threading
from collections.abc import Callable
from decimal import Decimal

import pytest

from agents.providers.base import (
    AbortSignal,
    ContentDelta,
    ContentDone,
    Finish,
    ImagePart,
    LLMMessage,
    ModelPrices,
    ModelSpec,
    ProviderError,
    ProviderResponse,
    ReasoningDelta,
    ReasoningDone,
    StreamChunk,
    TextPart,
    ToolCall,
    ToolCallDone,
    ToolCallStart,
    Usage,
    accumulate,
    response_chunks,
)

USAGE = Usage(prompt_tokens=1_000, completion_tokens=500, total_tokens=1_500, cached_tokens=400)


# Cost ------------------------------------------------------------------------------------------


def test_cost_charges_cached_prompt_tokens_at_the_cached_price() -> None:
    prices = ModelPrices(
        input_per_million=Decimal("3"),
        output_per_million=Decimal("15"),
        cached_per_million=Decimal("0.3"),
    )

    # 600 * 3 + 400 * 0.3 + 500 * 15 = 1800 + 120 + 7500 = 9420 per million
    assert prices.cost(USAGE) == Decimal("0.00942")


def test_cost_charges_cached_tokens_at_the_input_price_without_a_cached_price() -> None:
    prices = ModelPrices(input_per_million=Decimal("2"), output_per_million=Decimal("8"))

    assert prices.cost(USAGE) == Decimal("0.006")


@pytest.mark.parametrize(
    "prices",
    [
        ModelPrices(),
        ModelPrices(input_per_million=Decimal("1")),
        ModelPrices(output_per_million=Decimal("1")),
    ],
)
def test_cost_is_unknown_without_input_and_output_prices(prices: ModelPrices) -> None:
    assert prices.cost(USAGE) is None


def test_usages_add_up_field_by_field() -> None:
    total = USAGE + Usage(1, 2, 3, reasoning_tokens=4, cached_tokens=5)

    assert total == Usage(1_001, 502, 1_503, reasoning_tokens=4, cached_tokens=405)


# Streams ---------------------------------------------------------------------------------------


def test_accumulate_folds_every_kind_of_chunk() -> None:
    usage = Usage(3, 4, 7)
    chunks: list[StreamChunk] = [
        ReasoningDelta("hm"),
        ReasoningDelta("m"),
        ReasoningDone(),
        ContentDelta("Hel"),
        ContentDelta("lo"),
        ContentDone(),
        ToolCallStart(id="c1", name="search"),
        ToolCallDone(id="c1", name="search", arguments={"q": "x"}),
        Finish("tool_calls", usage, model_id="m-1", provider="openai"),
    ]

    assert accumulate(chunks) == ProviderResponse(
        content="Hello",
        reasoning="hmm",
        tool_calls=(ToolCall(id="c1", name="search", arguments={"q": "x"}),),
        finish_reason="tool_calls",
        usage=usage,
        model_id="m-1",
        provider="openai",
    )


def test_accumulate_refuses_a_stream_without_finish() -> None:
    with pytest.raises(ProviderError, match="without a finish chunk") as failure:
        accumulate([ContentDelta("cut off")])

    assert failure.value.retryable is True


def test_response_chunks_fold_back_into_the_same_response() -> None:
    response = ProviderResponse(
        content="abcdefg",
        reasoning="xyz",
        tool_calls=(ToolCall(id="c", name="t", arguments={}),),
        finish_reason="tool_calls",
        usage=Usage(1, 2, 3),
        model_id="m",
        provider="scripted",
    )

    chunks = response_chunks(response, chunk_size=3)

    assert [chunk for chunk in chunks if isinstance(chunk, ContentDelta)] == [
        ContentDelta("abc"),
        ContentDelta("def"),
        ContentDelta("g"),
    ]
    assert accumulate(chunks) == response


# AbortSignal -----------------------------------------------------------------------------------


def test_abort_callbacks_run_once_when_set() -> None:
    signal = AbortSignal()
    calls: list[str] = []
    signal.add_callback(lambda: calls.append("a"))

    signal.set()
    signal.set()

    assert calls == ["a"]
    assert signal.is_set is True


def test_an_unregistered_callback_is_not_run() -> None:
    signal = AbortSignal()
    calls: list[str] = []
    unregister = signal.add_callback(lambda: calls.append("gone"))
    signal.add_callback(lambda: calls.append("kept"))

    unregister()
    signal.set()

    assert calls == ["kept"]


def test_a_callback_added_after_set_runs_at_once() -> None:
    signal = AbortSignal()
    signal.set()
    calls: list[str] = []

    signal.add_callback(lambda: calls.append("late"))

    assert calls == ["late"]


def test_a_failing_callback_does_not_stop_the_others() -> None:
    signal = AbortSignal()
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("listener bug")

    signal.add_callback(broken)
    signal.add_callback(lambda: calls.append("ran"))
    signal.set()

    assert calls == ["ran"]


def test_wait_returns_when_another_thread_sets_the_signal() -> None:
    signal = AbortSignal()
    threading.Timer(0.05, signal.set).start()

    assert signal.wait(timeout=5) is True


# Messages and specs ----------------------------------------------------------------------------


def test_message_text_joins_content_and_text_parts_but_not_images() -> None:
    message = LLMMessage.user("look", ImagePart("image/png", data="AA=="), TextPart("closely"))

    assert message.text == "look\nclosely"
    assert message.content_parts()[0] == TextPart("look")


@pytest.mark.parametrize(
    ("build", "complaint"),
    [
        (lambda: LLMMessage(role="assistant", parts=(TextPart("x"),)), "content parts"),
        (
            lambda: LLMMessage(role="user", tool_calls=(ToolCall("c", "t", {}),)),
            "tool calls",
        ),
        (lambda: LLMMessage(role="tool", content="x"), "tool_call_id"),
        (lambda: ImagePart("image/png"), "exactly one"),
        (lambda: ImagePart("image/png", data="AA==", url="https://x.test/a.png"), "exactly one"),
    ],
)
def test_malformed_messages_are_refused(build: Callable[[], object], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        build()


def test_image_data_becomes_a_data_url() -> None:
    assert ImagePart("image/png", data="AA==").data_url == "data:image/png;base64,AA=="


def test_the_api_key_never_appears_in_a_spec_repr() -> None:
    spec = ModelSpec(name="m", kind="openai", model_id="gpt", api_key="sk-very-secret")

    assert "sk-very-secret" not in repr(spec)
