"""What remote tools' answers share on their way to tool results: a long text kept whole as an
attachment, of which the model reads the start."""

from __future__ import annotations

import base64
from typing import Any, Final

from agents.registry import ToolResult

# A result whose text passes this many characters is stored as a file; the model reads the
# first PREVIEW_CHARS and the file's name.
LARGE_RESULT_CHARS: Final = 20_000
PREVIEW_CHARS: Final = 2_000


def large_result(
    tool: str, text: str, attachments: list[dict[str, Any]], *, json_text: bool = False
) -> ToolResult:
    """A success holding ``text`` and ``attachments``; a text past ``LARGE_RESULT_CHARS`` is
    stored whole as the first attachment (``<tool>-result.txt``, or ``.json`` for a
    ``json_text``) and previewed."""
    if len(text) > LARGE_RESULT_CHARS:
        suffix, mime = (".json", "application/json") if json_text else (".txt", "text/plain")
        name = f"{tool}-result{suffix}"
        attachments = [
            {"name": name, "mimeType": mime, "data": base64.b64encode(text.encode()).decode()},
            *attachments,
        ]
        text = (
            f"{text[:PREVIEW_CHARS]}\n[... the result is {len(text)} characters; the first "
            f"{PREVIEW_CHARS} are above, the whole of it is stored as the attachment {name}]"
        )
    return ToolResult.success(text or None, attachments=attachments)
