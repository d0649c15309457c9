from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

from agents.registry import INVALID_TOOL_RESULT, ToolResult, tool_result_from

PNG = "iVBORw0KGgo="


def test_a_tool_result_is_returned_as_is() -> None:
    result = ToolResult.failure("no such city", code="not_found", data={"city": "Atlantis"})

    assert tool_result_from(result) is result


def test_none_is_a_success_without_a_result() -> None:
    assert tool_result_from(None) == ToolResult("success")


def test_a_string_is_a_successful_result() -> None:
    assert tool_result_from("sunny") == ToolResult("success", result="sunny")
    assert tool_result_from("") == ToolResult("success", result="")


def test_the_spec_shape_is_read_field_by_field() -> None:
    value = {
        "status": "success",
        "result": "done",
        "attachments": [{"name": "chart.png", "mimeType": "image/png", "data": PNG}],
        "stack": "ignored",
    }

    assert tool_result_from(value) == ToolResult(
        "success",
        result="done",
        attachments=({"name": "chart.png", "mimeType": "image/png", "data": PNG},),
    )


def test_a_spec_error_keeps_its_code_and_data() -> None:
    value = {
        "status": "error",
        "error": "quota exceeded",
        "error_code": "quota",
        "error_data": {"limit": 3},
    }

    assert tool_result_from(value) == ToolResult(
        "error", error="quota exceeded", error_code="quota", error_data={"limit": 3}
    )


def test_a_spec_error_without_a_message_gets_one() -> None:
    assert tool_result_from({"status": "error"}) == ToolResult(
        "error", error="The tool failed without a message"
    )


def test_a_non_string_spec_result_is_json_encoded() -> None:
    assert tool_result_from({"status": "success", "result": {"temp": 21}}) == ToolResult(
        "success", result='{"temp": 21}'
    )


def test_attachment_references_are_accepted() -> None:
    ref = {"id": "f1", "type": "file", "path": "/attachments/a.png", "name": "a.png"}

    assert tool_result_from({"status": "success", "attachments": [ref]}).attachments == (ref,)


@pytest.mark.parametrize(
    "attachments", [{"name": "a"}, [{"name": "a.png"}], ["a.png"], [{"type": "file"}]]
)
def test_malformed_attachments_make_an_invalid_result(attachments: Any) -> None:
    result = tool_result_from({"status": "success", "attachments": attachments})

    assert result.status == "error"
    assert result.error_code == INVALID_TOOL_RESULT
    assert result.error == (
        "Invalid tool result: attachments must be a list of {name, mimeType, data} or "
        "{type: 'file', path} objects"
    )


def test_mcp_text_parts_are_joined_by_newlines() -> None:
    value = {"content": [{"type": "text", "text": "line 1"}, {"type": "text", "text": "line 2"}]}

    assert tool_result_from(value) == ToolResult("success", result="line 1\nline 2")


def test_mcp_images_become_attachments_and_is_error_an_error() -> None:
    value = {
        "content": [
            {"type": "text", "text": "render failed"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
        ],
        "isError": True,
    }

    assert tool_result_from(value) == ToolResult(
        "error",
        error="render failed",
        attachments=({"name": "image-1.png", "mimeType": "image/png", "data": PNG},),
    )


def test_a_mapping_whose_status_is_data_is_plain_json() -> None:
    value = {"status": "shipped", "order": 7}

    assert tool_result_from(value) == ToolResult(
        "success", result='{"status": "shipped", "order": 7}'
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (21.5, "21.5"),
        (True, "true"),
        ([1, "two"], '[1, "two"]'),
        ({"city": "Zürich"}, '{"city": "Zürich"}'),
        ({"content": "not parts"}, '{"content": "not parts"}'),
    ],
)
def test_other_json_values_become_json_text(value: object, text: str) -> None:
    assert tool_result_from(value) == ToolResult("success", result=text)


def test_attachments_may_be_a_tuple_and_are_copied() -> None:
    attachment = {"name": "a.png", "mimeType": "image/png", "data": PNG}

    result = tool_result_from({"status": "success", "attachments": (attachment,)})
    attachment["name"] = "changed.png"

    assert result.attachments == ({"name": "a.png", "mimeType": "image/png", "data": PNG},)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"status": "error", "error": "x", "error_code": 7}, "error_code must be a string"),
        ({"status": "error", "error": "x", "error_data": {1, 2}}, "error_data must be JSON"),
        (float("nan"), "the tool returned a float, which is not JSON"),
        ({2, 1}, "the tool returned a set, which is not JSON"),
    ],
)
def test_values_that_cannot_be_stored_become_invalid_results(value: object, reason: str) -> None:
    assert tool_result_from(value) == ToolResult(
        "error", error=f"Invalid tool result: {reason}", error_code=INVALID_TOOL_RESULT
    )


def test_pydantic_models_and_dataclasses_become_json_text() -> None:
    class Weather(BaseModel):
        city: str
        temp: int

    @dataclass
    class Forecast:
        days: list[int]

    assert tool_result_from(Weather(city="Oslo", temp=3)).result == '{"city":"Oslo","temp":3}'
    assert tool_result_from(Forecast(days=[1, 2])).result == '{"days": [1, 2]}'


def test_as_dict_is_the_spec_shape_without_empty_parts() -> None:
    assert ToolResult.success("ok").as_dict() == {"status": "success", "result": "ok"}
    assert ToolResult.failure("boom", code="x", data=[1]).as_dict() == {
        "status": "error",
        "error": "boom",
        "error_code": "x",
        "error_data": [1],
    }
    attachment = {"name": "a.png", "mimeType": "image/png", "data": PNG}
    assert ToolResult.success(attachments=[attachment]).as_dict() == {
        "status": "success",
        "attachments": [attachment],
    }
