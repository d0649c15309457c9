"""The scripted provider: the in-process Script and stored, stateless rules."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.providers.base import (
    ContentDelta,
    ContentDone,
    Finish,
    LLMMessage,
    ModelSpec,
    ProviderError,
    ProviderRequest,
    ReasoningDelta,
    ReasoningDone,
    ToolCall,
    Usage,
    accumulate,
)
from agents.providers.registry import provider_for
from agents.providers.scripted import Expectation, Script, ScriptedProvider, check_scripted_config

CALL = ToolCall(id="call_1", name="search", arguments={"q": "tea"})
CONVERSATION = ProviderRequest(
    messages=(
        LLMMessage.system("You are a tea expert."),
        LLMMessage.user("Find me a green Tea"),
        LLMMessage.assistant(None, [CALL]),
        LLMMessage.tool(tool_call_id="call_1", name="search", content="sencha, matcha"),
    )
)
HELLO = ProviderRequest(messages=(LLMMessage.system("Be brief."), LLMMessage.user("hello")))


def _rules(*rules: dict[str, Any], **extra: Any) -> ScriptedProvider:
    spec = ModelSpec(
        name="demo", kind="scripted", model_id="demo-1", config={"rules": list(rules), **extra}
    )
    provider = provider_for(spec)
    assert isinstance(provider, ScriptedProvider)
    return provider


# Script ----------------------------------------------------------------------------------------


def test_script_answers_in_order_and_labels_itself_scripted() -> None:
    script = Script().text("first").tool_calls([{"name": "search", "arguments": {"q": "x"}}])
    provider = ScriptedProvider(script, name="demo", model_id="demo-1")

    first = provider.generate(HELLO)
    second = provider.generate(HELLO)

    assert (first.content, first.finish_reason, first.provider) == ("first", "stop", "scripted")
    assert first.model_id == "demo-1"
    assert second.tool_calls == (ToolCall(id="call_1", name="search", arguments={"q": "x"}),)
    assert second.finish_reason == "tool_calls"
    assert script.requests == [HELLO, HELLO]
    assert script.remaining == 0


def test_exhausted_script_raises_saying_so() -> None:
    provider = ScriptedProvider(Script().text("only one"))
    provider.generate(HELLO)

    with pytest.raises(ProviderError, match="the script is exhausted") as failure:
        provider.generate(HELLO)

    assert failure.value.retryable is False
    assert failure.value.code == "script_exhausted"


def test_met_expectations_let_the_response_through() -> None:
    expect = Expectation(
        contains_message="green Tea",
        contains_tool_result=("search", "matcha"),
        message_count=4,
        system_prompt_contains="tea expert",
    )
    provider = ScriptedProvider(Script().text("Try matcha.", expect=expect))

    assert provider.generate(CONVERSATION).content == "Try matcha."


@pytest.mark.parametrize(
    ("expect", "described"),
    [
        (
            Expectation(contains_message="oolong"),
            "expected a message containing 'oolong'; saw [system] 'You are a tea expert.', "
            "[user] 'Find me a green Tea', [assistant] '', [tool] 'sencha, matcha'",
        ),
        (
            Expectation(contains_tool_result=("search", "oolong")),
            "expected a result of tool 'search' containing 'oolong'; "
            "saw tool results search: 'sencha, matcha'",
        ),
        (Expectation(message_count=2), "expected 2 messages; saw 4"),
        (
            Expectation(system_prompt_contains="coffee"),
            "expected the system prompt to contain 'coffee'; saw 'You are a tea expert.'",
        ),
    ],
    ids=["message", "tool-result", "count", "system"],
)
def test_unmet_expectation_is_a_non_retryable_error_showing_expected_and_seen(
    expect: Expectation, described: str
) -> None:
    provider = ScriptedProvider(Script().text("never", expect=expect), name="demo")

    with pytest.raises(ProviderError) as failure:
        provider.generate(CONVERSATION)

    assert failure.value.message == f"scripted response #1 of model 'demo': {described}"
    assert failure.value.retryable is False
    assert failure.value.code == "script_expectation_failed"


def test_scripted_error_carries_message_code_status_and_retryability() -> None:
    script = (
        Script()
        .error("rate limited", code="rate_limit", status=429)
        .error("bad", status=400, retryable=False)
    )
    provider = ScriptedProvider(script)

    with pytest.raises(ProviderError) as first:
        provider.generate(HELLO)
    with pytest.raises(ProviderError) as second:
        provider.generate(HELLO)

    assert (first.value.message, first.value.code) == ("rate limited", "rate_limit")
    assert (first.value.http_status, first.value.retryable) == (429, True)
    assert (second.value.code, second.value.http_status, second.value.retryable) == (
        "scripted_error",
        400,
        False,
    )


def test_generated_tool_call_ids_count_up_across_the_script_and_given_ids_are_kept() -> None:
    script = (
        Script()
        .tool_calls([{"name": "a"}, {"name": "b", "id": "mine"}])
        .tool_calls([{"name": "c", "arguments": {"n": 1}}], content="calling c")
    )
    provider = ScriptedProvider(script)

    first = provider.generate(HELLO)
    second = provider.generate(HELLO)

    assert [(c.id, c.name) for c in first.tool_calls] == [("call_1", "a"), ("mine", "b")]
    assert second.tool_calls == (ToolCall(id="call_3", name="c", arguments={"n": 1}),)
    assert second.content == "calling c"


def test_reasoning_response_streams_reasoning_before_content() -> None:
    provider = ScriptedProvider(Script().reasoning("Sencha.", "Green, mild").streaming(6))

    chunks = list(provider.stream(HELLO))

    assert chunks[:-1] == [
        ReasoningDelta("Green,"),
        ReasoningDelta(" mild"),
        ReasoningDone(),
        ContentDelta("Sencha"),
        ContentDelta("."),
        ContentDone(),
    ]
    response = accumulate(chunks)
    assert (response.content, response.reasoning) == ("Sencha.", "Green, mild")


def test_usage_is_approximated_as_a_quarter_of_the_characters() -> None:
    provider = ScriptedProvider(Script().text("12345").reasoning("ok", "thought"))

    plain = provider.generate(HELLO)  # sent 9 + 5 characters, answered 5
    thoughtful = provider.generate(HELLO)

    assert plain.usage == Usage(prompt_tokens=4, completion_tokens=2, total_tokens=6)
    assert thoughtful.usage == Usage(4, 1 + 2, 7, reasoning_tokens=2)


def test_given_usage_and_finish_reason_override_the_defaults() -> None:
    usage = Usage(100, 50, 150, cached_tokens=10)
    provider = ScriptedProvider(Script().text("cut", usage=usage, finish_reason="length"))

    chunks = list(provider.stream(HELLO))

    assert chunks[-1] == Finish("length", usage, model_id="scripted", provider="scripted")


def test_without_streaming_configured_the_text_arrives_in_one_delta() -> None:
    chunks = list(ScriptedProvider(Script().text("whole answer")).stream(HELLO))

    assert chunks[:2] == [ContentDelta("whole answer"), ContentDone()]


def test_a_script_spec_reaches_the_script_through_provider_for() -> None:
    script = Script().text("via spec")

    response = provider_for(script.spec("demo")).generate(HELLO)

    assert response.content == "via spec"
    assert response.model_id == "demo"


# Stored rules ----------------------------------------------------------------------------------


def test_first_matching_rule_answers() -> None:
    provider = _rules(
        {"when": {"last_role": "tool"}, "respond": {"text": "tool answered"}},
        {"respond": {"text": "fallback"}},
        {"respond": {"text": "never reached"}},
    )

    assert provider.generate(CONVERSATION).content == "tool answered"
    assert provider.generate(HELLO).content == "fallback"


@pytest.mark.parametrize(
    ("when", "matches_conversation", "matches_hello"),
    [
        ({"last_role": "tool"}, True, False),
        ({"last_role": "user"}, False, True),
        ({"last_user_contains": "GREEN tea"}, True, False),
        ({"last_tool": "search"}, True, False),
        ({"last_tool": "browse"}, False, False),
        ({"system_contains": "BRIEF"}, False, True),
        ({"last_role": "tool", "system_contains": "brief"}, False, False),
    ],
)
def test_every_when_condition_must_hold(
    when: dict[str, str], matches_conversation: bool, matches_hello: bool
) -> None:
    provider = _rules({"when": when, "respond": {"text": "matched"}}, {"respond": {"text": "no"}})

    assert (provider.generate(CONVERSATION).content == "matched") is matches_conversation
    assert (provider.generate(HELLO).content == "matched") is matches_hello


def test_placeholders_are_replaced_in_text_and_argument_strings() -> None:
    provider = _rules(
        {
            "when": {"last_role": "tool"},
            "respond": {"text": "Asked {last_user_message!r}, got: {last_tool_result}"},
        },
        {
            "respond": {
                "tool_calls": [{"name": "search", "arguments": {"q": "{last_user_message}"}}],
                "text": "Searching",
            }
        },
    )

    answered = provider.generate(CONVERSATION)
    calling = provider.generate(HELLO)

    assert answered.content == "Asked {last_user_message!r}, got: sencha, matcha"
    assert calling.tool_calls == (ToolCall(id="call_1", name="search", arguments={"q": "hello"}),)
    assert calling.content == "Searching"


def test_placeholders_inside_the_user_text_are_not_expanded_again() -> None:
    provider = _rules({"respond": {"text": "You said: {last_user_message}"}})
    request = ProviderRequest(
        messages=(
            LLMMessage.tool(tool_call_id="c", name="t", content="SECRET"),
            LLMMessage.user("{last_tool_result} {0} {__class__}"),
        )
    )

    assert provider.generate(request).content == "You said: {last_tool_result} {0} {__class__}"


def _asked(text: str) -> ProviderRequest:
    return ProviderRequest(messages=(LLMMessage.system("Be brief."), LLMMessage.user(text)))


NUMBER_RULE = {
    "respond": {
        "tool_calls": [
            {
                "name": "packing_list",
                "arguments": {
                    "days": "{last_user_number}",
                    "note": "{last_user_number} days",
                    "nested": {"n": "{last_user_number}", "list": ["{last_user_number}", 1]},
                    "kept": 7,
                },
            }
        ],
        "text": "Packing for {last_user_number} days",
    }
}


@pytest.mark.parametrize(
    ("said", "number", "written"),
    [
        ("Pack for 3 days", 3, "3"),
        ("pack for 2.5 days, then 4 more", 2.5, "2.5"),
        ("it is -4 degrees in Oslo-3", -4, "-4"),
        ("a trip to Oslo-3", 3, "3"),
        ("10 days in v2.1", 10, "10"),
        ("1,000 miles", 1, "1"),
    ],
)
def test_a_whole_number_placeholder_argument_is_the_first_number_typed(
    said: str, number: float, written: str
) -> None:
    response = _rules(NUMBER_RULE).generate(_asked(said))

    (call,) = response.tool_calls
    assert call.arguments == {
        "days": number,
        "note": f"{written} days",
        "nested": {"n": number, "list": [number, 1]},
        "kept": 7,
    }
    assert type(call.arguments["days"]) is type(number)
    assert response.content == f"Packing for {written} days"


def test_without_a_number_a_whole_number_argument_is_left_out_and_a_list_holds_null() -> None:
    response = _rules(NUMBER_RULE).generate(_asked("Pack for a long weekend"))

    (call,) = response.tool_calls
    assert call.arguments == {"note": " days", "nested": {"list": [None, 1]}, "kept": 7}
    assert response.content == "Packing for  days"


def test_the_number_comes_from_the_newest_user_message_only() -> None:
    request = ProviderRequest(
        messages=(
            LLMMessage.user("Pack for 3 days"),
            LLMMessage.assistant("Done."),
            LLMMessage.user("And for 12?"),
        )
    )

    (call,) = _rules(NUMBER_RULE).generate(request).tool_calls

    assert call.arguments["days"] == 12


def test_other_argument_placeholders_stay_text_even_when_they_read_as_numbers() -> None:
    provider = _rules(
        {"respond": {"tool_calls": [{"name": "t", "arguments": {"q": "{last_user_message}"}}]}}
    )

    (call,) = provider.generate(_asked("42")).tool_calls

    assert call.arguments == {"q": "42"}


def test_rule_tool_call_ids_follow_the_calls_already_in_the_history() -> None:
    provider = _rules({"respond": {"tool_calls": [{"name": "a"}, {"name": "b"}]}})

    response = provider.generate(CONVERSATION)

    assert [call.id for call in response.tool_calls] == ["call_2", "call_3"]
    assert response.finish_reason == "tool_calls"


def test_no_matching_rule_is_a_non_retryable_error_naming_the_last_role() -> None:
    provider = _rules({"when": {"last_role": "user"}, "respond": {"text": "hi"}})

    with pytest.raises(ProviderError) as failure:
        provider.generate(CONVERSATION)

    assert "no scripted rule of model 'demo' matches" in failure.value.message
    assert "last message role: tool" in failure.value.message
    assert failure.value.retryable is False


@pytest.mark.parametrize(("status", "retryable"), [(None, True), (503, True), (400, False)])
def test_error_rules_fail_with_their_status(status: int | None, retryable: bool) -> None:
    respond: dict[str, Any] = {"error": "scripted outage"}
    if status is not None:
        respond["status"] = status
    provider = _rules({"respond": respond})

    with pytest.raises(ProviderError, match="scripted outage") as failure:
        provider.generate(HELLO)

    assert failure.value.http_status == (status or 500)
    assert failure.value.retryable is retryable


def test_stored_rules_are_stateless_and_answer_alike_every_time() -> None:
    rules = {"respond": {"tool_calls": [{"name": "search", "arguments": {}}]}}

    answers = [_rules(rules).generate(HELLO) for _ in range(3)]

    assert answers[0] == answers[1] == answers[2]


def test_rules_stream_with_the_configured_chunking() -> None:
    provider = _rules(
        {"respond": {"text": "abcdefgh"}}, streaming={"chunk_size": 3, "chunk_delay_ms": 0}
    )

    chunks = list(provider.stream(HELLO))

    assert chunks[:4] == [
        ContentDelta("abc"),
        ContentDelta("def"),
        ContentDelta("gh"),
        ContentDone(),
    ]


def test_invalid_stored_config_makes_the_provider_raise_a_clear_error() -> None:
    spec = ModelSpec(name="demo", kind="scripted", model_id="demo", config={"rules": []})

    with pytest.raises(ProviderError) as failure:
        provider_for(spec)

    assert failure.value.message == (
        "scripted model 'demo' has an invalid configuration: "
        "rules: required: a non-empty list of {when, respond} rules"
    )
    assert failure.value.retryable is False


# check_scripted_config -------------------------------------------------------------------------


def test_a_valid_config_has_no_problems() -> None:
    config = {
        "rules": [
            {"when": {"last_role": "tool", "last_tool": "search"}, "respond": {"text": "done"}},
            {
                "when": {"last_user_contains": "x", "system_contains": "y"},
                "respond": {"tool_calls": [{"name": "search", "arguments": {"q": 1}}], "text": ""},
            },
            {"respond": {"error": "down", "status": 503, "delay_ms": 10}},
            {"respond": {"text": "t", "reasoning": "r"}},
        ],
        "streaming": {"chunk_size": 8, "chunk_delay_ms": 0},
    }

    assert check_scripted_config(config) == []


@pytest.mark.parametrize(
    ("config", "problems"),
    [
        ([], [("", "must be an object with a 'rules' list")]),
        ({}, [("rules", "required: a non-empty list of {when, respond} rules")]),
        (
            {"rules": [{"respond": {"text": "x"}}], "extra": 1},
            [("extra", "unknown key; expected one of rules, streaming")],
        ),
        (
            {"rules": ["x"]},
            [("rules[0]", "must be an object with 'respond' and optionally 'when'")],
        ),
        ({"rules": [{"when": {}}]}, [("rules[0].respond", "required")]),
        (
            {"rules": [{"respond": {"text": "ok"}}, {"respond": {}}]},
            [("rules[1].respond", "needs one of 'text', 'tool_calls' or 'error'")],
        ),
        (
            {"rules": [{"respond": {"text": "a", "error": "b"}}]},
            [("rules[0].respond", "'error' cannot be combined with text, reasoning or tool_calls")],
        ),
        (
            {"rules": [{"when": {"last_role": "robot", "mood": "x"}, "respond": {"text": "a"}}]},
            [
                (
                    "rules[0].when.mood",
                    "unknown key; expected one of last_role, last_user_contains, last_tool, "
                    "system_contains",
                ),
                ("rules[0].when.last_role", "must be one of system, user, assistant, tool"),
            ],
        ),
        (
            {"rules": [{"when": {"last_tool": ""}, "respond": {"text": 5}}]},
            [
                ("rules[0].when.last_tool", "must be a non-empty string"),
                ("rules[0].respond.text", "must be a string"),
            ],
        ),
        (
            {"rules": [{"respond": {"tool_calls": [{"arguments": []}, "x"]}}]},
            [
                ("rules[0].respond.tool_calls[0].name", "required: the tool's name"),
                ("rules[0].respond.tool_calls[0].arguments", "must be an object"),
                ("rules[0].respond.tool_calls[1]", "must be an object with 'name' and 'arguments'"),
            ],
        ),
        (
            {"rules": [{"respond": {"error": "x", "status": 200}}]},
            [("rules[0].respond.status", "must be an HTTP error status (400-599)")],
        ),
        (
            {"rules": [{"respond": {"text": "x", "status": 500, "delay_ms": -1}}]},
            [
                ("rules[0].respond.status", "only applies to an 'error' response"),
                ("rules[0].respond.delay_ms", "must be an integer from 0 to 60000"),
            ],
        ),
        (
            {
                "rules": [
                    {"respond": {"text": "Hi {last_usr_message}, {not_ours} {last_tool_result}"}}
                ]
            },
            [
                (
                    "rules[0].respond.text",
                    "unknown placeholder {last_usr_message}; known: {last_user_message}, "
                    "{last_tool_result}, {last_user_number}",
                )
            ],
        ),
        (
            {
                "rules": [
                    {
                        "respond": {
                            "tool_calls": [
                                {
                                    "name": "t",
                                    "arguments": {
                                        "days": "{last_user_numbr}",
                                        "deep": [{"x": "{last_number} {last_}"}],
                                    },
                                }
                            ]
                        }
                    },
                    {"respond": {"error": "{last_error}"}},
                ]
            },
            [
                (
                    "rules[0].respond.tool_calls[0].arguments.days",
                    "unknown placeholder {last_user_numbr}; known: {last_user_message}, "
                    "{last_tool_result}, {last_user_number}",
                ),
                (
                    "rules[0].respond.tool_calls[0].arguments.deep[0].x",
                    "unknown placeholder {last_number}, {last_}; known: {last_user_message}, "
                    "{last_tool_result}, {last_user_number}",
                ),
                (
                    "rules[1].respond.error",
                    "unknown placeholder {last_error}; known: {last_user_message}, "
                    "{last_tool_result}, {last_user_number}",
                ),
            ],
        ),
        (
            {"rules": [{"respond": {"text": "x"}}], "streaming": {"chunk_size": 0}},
            [("streaming.chunk_size", "must be an integer from 1 to 1000000")],
        ),
        (
            {"rules": [{"respond": {"text": "x"}}], "streaming": {"chunk_delay_ms": True}},
            [("streaming.chunk_delay_ms", "must be an integer from 0 to 60000")],
        ),
    ],
)
def test_each_config_problem_is_reported_with_its_path(
    config: object, problems: list[tuple[str, str]]
) -> None:
    assert check_scripted_config(config) == problems


@pytest.mark.django_db
def test_a_misspelt_placeholder_is_a_400_naming_the_argument(member: APIClient) -> None:
    model = {
        "name": "fast",
        "provider": "scripted",
        "model_id": "scripted",
        "config": {
            "rules": [
                {
                    "respond": {
                        "tool_calls": [
                            {"name": "packing_list", "arguments": {"days": "{last_user_numbr}"}}
                        ]
                    }
                }
            ]
        },
    }

    response = member.post("/api/v1/models", model, format="json")

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["field"] == "config.rules[0].respond.tool_calls[0].arguments.days"
    assert "unknown placeholder {last_user_numbr}" in error["message"]
