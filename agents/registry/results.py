"""What a tool returns, normalised into the spec's ToolResult (spec §7)."""

from __future__ import annotations

import dataclasses
import json
import mimetypes
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced (spec §7).

    ``attachments`` hold spec ToolAttachments ``{name, mimeType, data (base64), width?,
    height?}`` or AttachmentRefs ``{type: "file", path, ...}``; ``error_code`` and ``error_data``
    are the builder's machine-readable extras for errors; ``subagent_id`` names the child
    thread of a subagent call.
    """

    status: Literal["success", "error"]
    result: str | None = None
    error: str | None = None
    attachments: tuple[Mapping[str, Any], ...] = ()
    error_code: str | None = None
    error_data: Any = None
    subagent_id: str | None = None  # the child thread a subagent tool call concerns

    @classmethod
    def success(
        cls, result: str | None = None, *, attachments: Iterable[Mapping[str, Any]] = ()
    ) -> ToolResult:
        return cls("success", result=result, attachments=tuple(attachments))

    @classmethod
    def failure(cls, error: str, *, code: str | None = None, data: Any = None) -> ToolResult:
        return cls("error", error=error, error_code=code, error_data=data)

    def as_dict(self) -> dict[str, Any]:
        """The spec's JSON shape; absent parts are left out."""
        body: dict[str, Any] = {"status": self.status}
        optional = {
            "result": self.result,
            "error": self.error,
            "attachments": [dict(item) for item in self.attachments] or None,
            "error_code": self.error_code,
            "error_data": self.error_data,
            "subagent_id": self.subagent_id,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        return body


INVALID_TOOL_RESULT = "invalid_tool_result"


def tool_result_from(value: object) -> ToolResult:
    """Normalise whatever a tool function returned into a :class:`ToolResult`. Never raises.

    - a ``ToolResult``: itself;
    - ``None``: success without a result (the runtime stores ``Tool executed successfully``);
    - a ``str``: success with that text;
    - a mapping whose ``status`` is ``"success"`` or ``"error"``: the spec shape (``result``,
      ``error``, ``attachments``, ``error_code``, ``error_data``; other keys are ignored; a
      non-string ``result`` is JSON-encoded; an error without a message gets one);
    - a mapping with a ``content`` list of MCP parts: ``text`` parts joined by newlines, ``image``
      parts (``data``, ``mimeType``) become attachments, ``isError: true`` makes it an error;
    - a pydantic model or dataclass instance, or any other JSON-serialisable value (numbers,
      lists, other mappings): success with its JSON text.

    Anything else, or a malformed spec shape, becomes an error result with ``error_code``
    ``invalid_tool_result``: a tool's bug is reported to the model, not raised into the loop.
    """
    if isinstance(value, ToolResult):
        return value
    if value is None:
        return ToolResult.success()
    if isinstance(value, str):
        return ToolResult.success(value)
    if isinstance(value, Mapping):
        if value.get("status") in ("success", "error"):
            return _spec_result(value)
        if _is_mcp_content(value.get("content")):
            return _mcp_result(value)
    if isinstance(value, BaseModel):
        return ToolResult.success(value.model_dump_json())
    try:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return ToolResult.success(_json(dataclasses.asdict(value)))
        return ToolResult.success(_json(value))
    except (TypeError, ValueError):
        return _invalid(f"the tool returned a {type(value).__name__}, which is not JSON")


def _spec_result(value: Mapping[str, Any]) -> ToolResult:
    raw = value.get("attachments") or []
    if not isinstance(raw, list | tuple) or not all(_is_attachment(item) for item in raw):
        return _invalid(
            "attachments must be a list of {name, mimeType, data} or {type: 'file', path} objects"
        )
    error_code = value.get("error_code")
    if error_code is not None and not isinstance(error_code, str):
        return _invalid("error_code must be a string")
    try:
        _json(value.get("error_data"))
    except (TypeError, ValueError):
        return _invalid("error_data must be JSON")
    attachments = tuple(dict(item) for item in raw)
    if value["status"] == "error":
        error = value.get("error")
        return ToolResult(
            "error",
            error=_text(error) if error not in (None, "") else "The tool failed without a message",
            attachments=attachments,
            error_code=error_code,
            error_data=value.get("error_data"),
        )
    result = value.get("result")
    return ToolResult(
        "success", result=None if result is None else _text(result), attachments=attachments
    )


def _is_mcp_content(content: object) -> bool:
    return isinstance(content, list) and all(
        isinstance(part, Mapping) and isinstance(part.get("type"), str) for part in content
    )


def _mcp_result(value: Mapping[str, Any]) -> ToolResult:
    texts: list[str] = []
    attachments: list[dict[str, Any]] = []
    for part in value["content"]:
        if part["type"] == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part["type"] == "image" and isinstance(part.get("data"), str):
            mime = str(part.get("mimeType") or "application/octet-stream")
            extension = mimetypes.guess_extension(mime) or ".bin"
            name = f"image-{len(attachments) + 1}{extension}"
            attachments.append({"name": name, "mimeType": mime, "data": part["data"]})
    text = "\n".join(texts) if texts else None
    if value.get("isError") is True:
        return ToolResult(
            "error",
            error=text or "The tool failed without a message",
            attachments=tuple(attachments),
        )
    return ToolResult("success", result=text, attachments=tuple(attachments))


def _is_attachment(item: object) -> bool:
    if not isinstance(item, Mapping):
        return False
    if item.get("type") == "file":
        return isinstance(item.get("path"), str)
    return all(isinstance(item.get(key), str) for key in ("name", "mimeType", "data"))


def _json(value: object) -> str:
    """Strict JSON text (no NaN or Infinity). Raises TypeError or ValueError."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return _json(value)
    except (TypeError, ValueError):
        return str(value)


def _invalid(reason: str) -> ToolResult:
    return ToolResult.failure(f"Invalid tool result: {reason}", code=INVALID_TOOL_RESULT)
