"""threads/runtime/context.py: the rendered system prompt and the history a model sees."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, Literal

from agents.documents import PromptDoc
from agents.providers.base import ImagePart, LLMMessage, TextPart, ToolCall
from threads.runtime.context import (
    MAX_INCLUDE_DEPTH,
    EnvType,
    HistoryOptions,
    history_to_llm,
    render_system_prompt,
    stored_tool_calls,
)

# The system prompt -----------------------------------------------------------------------------


def _prompt(name: str, *parts: str | dict[str, str]) -> PromptDoc:
    return PromptDoc.model_validate(
        {
            "name": name,
            "tool_description": f"The {name} prompt.",
            "model": "m",
            "prompt": [
                {"type": "text", "content": part} if isinstance(part, str) else part
                for part in parts
            ],
        }
    )


def _include(name: str) -> dict[str, str]:
    return {"type": "include", "prompt": name}


def _render(
    prompt: PromptDoc,
    library: Mapping[str, PromptDoc] = {},
    env: Mapping[str, tuple[str, EnvType]] = {},
    variables: Mapping[str, Any] = {},
) -> str:
    return render_system_prompt(prompt, load_prompt=library.get, env=env.get, variables=variables)


def test_text_parts_concatenate_without_separator() -> None:
    assert _render(_prompt("main", "You are ", "helpful.")) == "You are helpful."


def test_include_renders_the_named_prompt_recursively() -> None:
    library = {
        "persona": _prompt("persona", "a pirate", _include("accent")),
        "accent": _prompt("accent", " from Cornwall"),
    }

    rendered = _render(_prompt("main", "You are ", _include("persona"), "."), library)

    assert rendered == "You are a pirate from Cornwall."


def test_missing_include_renders_a_not_found_marker() -> None:
    assert _render(_prompt("main", "A", _include("gone"), "B")) == "A[Prompt not found: gone]B"


def test_include_cycle_renders_a_marker_instead_of_recursing() -> None:
    library = {"b": _prompt("b", "b;", _include("a")), "c": _prompt("c", _include("c"))}

    assert _render(_prompt("a", "a;", _include("b")), library) == (
        "a;b;[Prompt include cycle: a -> b -> a]"
    )
    assert _render(_prompt("x", _include("c")), library) == "[Prompt include cycle: c -> c]"


def test_include_nested_deeper_than_the_limit_renders_a_marker() -> None:
    names = [f"p{index}" for index in range(MAX_INCLUDE_DEPTH + 2)]
    library = {
        name: _prompt(name, f"{index},", _include(names[index + 1]))
        for index, name in enumerate(names[:-1])
    }
    library[names[-1]] = _prompt(names[-1], "bottom")

    rendered = _render(library["p0"], library)

    chain = " -> ".join(names)
    assert rendered == "".join(f"{i}," for i in range(MAX_INCLUDE_DEPTH + 1)) + (
        f"[Prompt include cycle: {chain}]"
    )


def test_env_parts_render_text_values_and_never_secrets() -> None:
    prompt = _prompt(
        "main",
        "[",
        {"type": "env", "property": "CITY"},
        "|",
        {"type": "env", "property": "API_KEY"},
        "|",
        {"type": "env", "property": "UNSET"},
        "]",
    )
    env: dict[str, tuple[str, EnvType]] = {
        "CITY": ("Lisbon", "text"),
        "API_KEY": ("sk-live-123", "secret"),
    }

    assert _render(prompt, env=env) == "[Lisbon||]"


def test_variable_parts_render_strings_json_or_the_literal_placeholder() -> None:
    prompt = _prompt(
        "main",
        {"type": "variable", "value": "user"},
        " ",
        {"type": "variable", "value": "prefs"},
        " ",
        {"type": "variable", "value": "count"},
        " ",
        {"type": "variable", "value": "missing"},
    )
    variables = {"user": "Ana", "prefs": {"tea": ["green", "é"]}, "count": 3}

    assert _render(prompt, variables=variables) == 'Ana {"tea":["green","é"]} 3 {{missing}}'


# Stored tool calls -----------------------------------------------------------------------------


def test_stored_tool_calls_accepts_the_json_string_and_the_parsed_list() -> None:
    entries = [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"q": 1}'}},
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
        {"id": "c3", "type": "function", "function": {"name": "h", "arguments": "[1]"}},
        {"id": "c4", "name": "k", "arguments": {"z": True}},
        {"type": "function", "function": {"name": "no_id", "arguments": "{}"}},
    ]
    expected = [
        ToolCall(id="c1", name="f", arguments={"q": 1}),
        ToolCall(id="c2", name="g", arguments={}),
        ToolCall(id="c3", name="h", arguments={}),
        ToolCall(id="c4", name="k", arguments={"z": True}),
    ]

    assert stored_tool_calls(json.dumps(entries)) == expected
    assert stored_tool_calls(entries) == expected
    assert stored_tool_calls(None) == []
    assert stored_tool_calls("{broken") == []


# History ---------------------------------------------------------------------------------------


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> str:
    return json.dumps(
        [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for call_id, name, arguments in calls
        ]
    )


def _msg(
    seq: int,
    role: str,
    content: str | None = None,
    *,
    side: str | None = "by role",
    tool_calls: str | None = None,
    tool_call_id: str | None = None,
    name: str | None = None,
    status: str = "completed",
    attachments: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A hook-visible message (``message_json`` plus ``seq``); side A writes ``assistant``."""
    if side == "by role":
        side = {"assistant": "a", "user": "b"}.get(role)
    return {
        "id": f"m{seq}",
        "seq": seq,
        "role": role,
        "content": content,
        "name": name,
        "tool_calls": tool_calls,
        "tool_call_id": tool_call_id,
        "tool_status": "success" if role == "tool" else None,
        "created_at": seq * 1000,
        "parent_id": None,
        "depth": 0,
        "silent": False,
        "status": status,
        "side": side,
        "metadata": {},
        "attachments": attachments or [],
    }


def _options(
    *,
    include_past_tools: bool = True,
    acting_side: Literal["a", "b"] = "a",
    relabel: bool = False,
    vision: bool = False,
    flow_start_seq: int = 0,
    recent_image_threshold: int = 10,
) -> HistoryOptions:
    return HistoryOptions(
        include_past_tools=include_past_tools,
        acting_side=acting_side,
        relabel=relabel,
        vision=vision,
        flow_start_seq=flow_start_seq,
        recent_image_threshold=recent_image_threshold,
    )


def _no_files(path: str) -> bytes | None:
    raise AssertionError(f"no file should be read, asked for {path}")


def test_history_converts_roles_calls_and_results() -> None:
    messages = [
        _msg(1, "system", "Be brief."),
        _msg(2, "user", "Weather?"),
        _msg(3, "assistant", "", tool_calls=_calls(("c1", "weather", {"city": "Oslo"}))),
        _msg(4, "tool", "Rain", side="a", tool_call_id="c1", name="weather"),
        _msg(5, "assistant", "It rains."),
    ]

    assert history_to_llm(messages, _options(), read_file=_no_files) == [
        LLMMessage.system("Be brief."),
        LLMMessage.user("Weather?"),
        LLMMessage.assistant(None, [ToolCall(id="c1", name="weather", arguments={"city": "Oslo"})]),
        LLMMessage.tool(tool_call_id="c1", name="weather", content="Rain"),
        LLMMessage.assistant("It rains."),
    ]


def test_pending_messages_are_never_sent() -> None:
    messages = [_msg(1, "user", "Hi"), _msg(2, "assistant", "", status="pending")]

    assert history_to_llm(messages, _options(), read_file=_no_files) == [LLMMessage.user("Hi")]


def test_orphan_tool_results_are_dropped() -> None:
    messages = [
        _msg(1, "tool", "early", side="a", tool_call_id="c1", name="f"),
        _msg(2, "assistant", "Calling.", tool_calls=_calls(("c1", "f", {}))),
        _msg(3, "tool", "answer", side="a", tool_call_id="c1", name="f"),
        _msg(4, "tool", "stray", side="a", tool_call_id="c9", name="f"),
        _msg(5, "user", "Thanks"),
    ]

    assert history_to_llm(messages, _options(), read_file=_no_files) == [
        LLMMessage.assistant("Calling.", [ToolCall(id="c1", name="f", arguments={})]),
        LLMMessage.tool(tool_call_id="c1", name="f", content="answer"),
        LLMMessage.user("Thanks"),
    ]


def test_unanswered_calls_are_stripped_except_on_the_last_message() -> None:
    messages = [
        _msg(1, "assistant", "Two calls.", tool_calls=_calls(("c1", "f", {}), ("c2", "g", {}))),
        _msg(2, "tool", "done", side="a", tool_call_id="c1", name="f"),
        _msg(3, "assistant", "", tool_calls=_calls(("c3", "h", {}))),
        _msg(4, "user", "Go on"),
        _msg(5, "assistant", "", tool_calls=_calls(("c4", "k", {"n": 1}))),
    ]

    assert history_to_llm(messages, _options(), read_file=_no_files) == [
        LLMMessage.assistant("Two calls.", [ToolCall(id="c1", name="f", arguments={})]),
        LLMMessage.tool(tool_call_id="c1", name="f", content="done"),
        LLMMessage.user("Go on"),
        LLMMessage.assistant(None, [ToolCall(id="c4", name="k", arguments={"n": 1})]),
    ]


def test_a_result_answers_the_latest_call_with_a_reused_id_and_borrows_its_name() -> None:
    messages = [
        _msg(1, "assistant", "", tool_calls=_calls(("call_1", "f", {}))),
        _msg(2, "tool", "one", side="a", tool_call_id="call_1"),
        _msg(3, "assistant", "", tool_calls=_calls(("call_1", "g", {}))),
        _msg(4, "tool", "two", side="a", tool_call_id="call_1"),
    ]

    assert history_to_llm(messages, _options(), read_file=_no_files) == [
        LLMMessage.assistant(None, [ToolCall(id="call_1", name="f", arguments={})]),
        LLMMessage.tool(tool_call_id="call_1", name="f", content="one"),
        LLMMessage.assistant(None, [ToolCall(id="call_1", name="g", arguments={})]),
        LLMMessage.tool(tool_call_id="call_1", name="g", content="two"),
    ]


def _two_flows() -> list[dict[str, Any]]:
    return [
        _msg(1, "user", "First"),
        _msg(2, "assistant", "", tool_calls=_calls(("c1", "f", {}))),
        _msg(3, "tool", "r1", side="a", tool_call_id="c1", name="f"),
        _msg(4, "assistant", "Done once.", tool_calls=_calls(("c2", "g", {}))),
        _msg(5, "tool", "r2", side="a", tool_call_id="c2", name="g"),
        _msg(6, "user", "Again"),
        _msg(7, "assistant", "", tool_calls=_calls(("c3", "f", {}))),
        _msg(8, "tool", "r3", side="a", tool_call_id="c3", name="f"),
    ]


def test_without_past_tools_only_the_current_flow_keeps_calls_and_results() -> None:
    options = _options(include_past_tools=False, flow_start_seq=5)

    assert history_to_llm(_two_flows(), options, read_file=_no_files) == [
        LLMMessage.user("First"),
        LLMMessage.assistant("Done once."),
        LLMMessage.user("Again"),
        LLMMessage.assistant(None, [ToolCall(id="c3", name="f", arguments={})]),
        LLMMessage.tool(tool_call_id="c3", name="f", content="r3"),
    ]


def test_with_past_tools_every_flow_keeps_calls_and_results() -> None:
    options = _options(include_past_tools=True, flow_start_seq=5)

    assert history_to_llm(_two_flows(), options, read_file=_no_files) == [
        LLMMessage.user("First"),
        LLMMessage.assistant(None, [ToolCall(id="c1", name="f", arguments={})]),
        LLMMessage.tool(tool_call_id="c1", name="f", content="r1"),
        LLMMessage.assistant("Done once.", [ToolCall(id="c2", name="g", arguments={})]),
        LLMMessage.tool(tool_call_id="c2", name="g", content="r2"),
        LLMMessage.user("Again"),
        LLMMessage.assistant(None, [ToolCall(id="c3", name="f", arguments={})]),
        LLMMessage.tool(tool_call_id="c3", name="f", content="r3"),
    ]


def _dual_ai() -> list[dict[str, Any]]:
    return [
        _msg(1, "system", "Debate."),
        _msg(2, "user", "Topic: tea", side=None),
        _msg(3, "assistant", "Let me look.", tool_calls=_calls(("a1", "search", {"q": "tea"}))),
        _msg(4, "tool", "Tea is good", side="a", tool_call_id="a1", name="search"),
        _msg(5, "assistant", "Tea wins."),
        _msg(6, "user", "", tool_calls=_calls(("b1", "fact_check", {}))),
        _msg(7, "tool", "False", side="b", tool_call_id="b1", name="fact_check"),
        _msg(8, "user", "Coffee wins."),
    ]


def test_dual_ai_side_b_sees_itself_as_assistant_and_not_side_a_tools() -> None:
    options = _options(acting_side="b", relabel=True)

    assert history_to_llm(_dual_ai(), options, read_file=_no_files) == [
        LLMMessage.system("Debate."),
        LLMMessage.assistant("Topic: tea"),
        LLMMessage.user("Let me look."),
        LLMMessage.user("Tea wins."),
        LLMMessage.assistant(None, [ToolCall(id="b1", name="fact_check", arguments={})]),
        LLMMessage.tool(tool_call_id="b1", name="fact_check", content="False"),
        LLMMessage.assistant("Coffee wins."),
    ]


def test_dual_ai_side_a_keeps_roles_and_does_not_see_side_b_tools() -> None:
    options = _options(acting_side="a", relabel=True)

    assert history_to_llm(_dual_ai(), options, read_file=_no_files) == [
        LLMMessage.system("Debate."),
        LLMMessage.user("Topic: tea"),
        LLMMessage.assistant(
            "Let me look.", [ToolCall(id="a1", name="search", arguments={"q": "tea"})]
        ),
        LLMMessage.tool(tool_call_id="a1", name="search", content="Tea is good"),
        LLMMessage.assistant("Tea wins."),
        LLMMessage.user("Coffee wins."),
    ]


_PHOTO = {
    "id": "f1",
    "type": "file",
    "path": "/attachments/cat.png",
    "name": "cat.png",
    "mimeType": "image/png",
    "size": 3,
    "width": 640,
    "height": 480,
    "description": "A cat.",
}
_PHOTO_BYTES = b"\x89PN"


def _read_photo(path: str) -> bytes | None:
    return _PHOTO_BYTES if path == "/attachments/cat.png" else None


def test_recent_images_are_sent_as_images_when_the_model_has_vision() -> None:
    messages = [
        _msg(1, "user", "Old", attachments=[_PHOTO]),
        _msg(2, "assistant", "Nice."),
        _msg(3, "user", "New", attachments=[_PHOTO]),
        _msg(4, "assistant", "Again."),
    ]
    options = _options(vision=True, recent_image_threshold=3)

    assert history_to_llm(messages, options, read_file=_read_photo) == [
        LLMMessage.user("Old", TextPart("[Image: cat.png (640x480)] A cat.")),
        LLMMessage.assistant("Nice."),
        LLMMessage.user(
            "New", ImagePart(mime_type="image/png", data=base64.b64encode(_PHOTO_BYTES).decode())
        ),
        LLMMessage.assistant("Again."),
    ]


def test_images_are_described_when_the_model_has_no_vision() -> None:
    messages = [_msg(1, "user", "Look", attachments=[_PHOTO])]

    assert history_to_llm(messages, _options(vision=False), read_file=_no_files) == [
        LLMMessage.user("Look", TextPart("[Image: cat.png (640x480)] A cat.")),
    ]


def test_unreadable_image_is_described_without_missing_details() -> None:
    bare = {"type": "file", "path": "/attachments/x.jpg", "name": "x.jpg", "mimeType": "image/jpeg"}
    messages = [_msg(1, "user", None, attachments=[bare])]

    assert history_to_llm(messages, _options(vision=True), read_file=lambda path: None) == [
        LLMMessage.user(None, TextPart("[Image: x.jpg]")),
    ]


def test_non_image_attachments_become_one_attached_files_note() -> None:
    report = {"path": "/attachments/r.pdf", "name": "r.pdf", "mimeType": "application/pdf"}
    data = {"path": "/attachments/d.csv", "name": "d.csv", "mimeType": "text/csv"}
    messages = [_msg(1, "user", "Files", attachments=[report, _PHOTO, data])]

    assert history_to_llm(messages, _options(vision=True), read_file=_read_photo) == [
        LLMMessage.user(
            "Files",
            ImagePart(mime_type="image/png", data=base64.b64encode(_PHOTO_BYTES).decode()),
            TextPart("[Attached files: r.pdf (/attachments/r.pdf), d.csv (/attachments/d.csv)]"),
        ),
    ]


def test_attachments_of_assistant_messages_are_described_in_their_text() -> None:
    report = {"path": "/attachments/r.pdf", "name": "r.pdf", "mimeType": "application/pdf"}
    messages = [_msg(1, "assistant", "Here.", attachments=[_PHOTO, report])]

    assert history_to_llm(messages, _options(vision=True), read_file=_no_files) == [
        LLMMessage.assistant(
            "Here.\n[Image: cat.png (640x480)] A cat.\n[Attached files: r.pdf (/attachments/r.pdf)]"
        ),
    ]
