"""The engine's door to remote tools: what a prompt's ``tools[]`` reference to a remote source
resolves to, and calling one.

A reference names a source by its prefix. Today the one source is MCP: ``mcp:<server>`` (every
tool the server lists) or ``mcp:<server>/<tool>`` (one). Another source (A2A agents) adds its
prefix to :data:`SOURCES` with a resolver and a caller; the engine does not change.

The model sees a remote tool as ``<server>__<tool>``, the remote name's characters outside
``[A-Za-z0-9_-]`` replaced by ``_`` and cut to 64 characters (a provider's limit): two tools of
one server that become the same name are refused (:func:`remote_check` names them, and a flow
offers only the first).

:func:`remote_call` never raises: a transport error, a timeout, an egress refusal, a deleted
server or the tool's own error (``isError``) is a failure result naming the server. It opens
no transaction and must be called with none open (the runner calls it after ``flow.idle()``).
"""

from __future__ import annotations

import base64
import json
import logging
import mimetypes
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from agents.registry import ToolResult
from agents.remote_refs import RemoteRefCheck
from connectors import client
from connectors.client import McpUnavailable
from connectors.models import McpServer
from connectors.servers import (
    contact_recorded,
    server_endpoint,
    server_failure,
    token_forget,
    tools_current,
)
from tenancy.models import Tenant

logger = logging.getLogger(__name__)

Source = Literal["mcp"]
MCP_PREFIX: Final = "mcp:"
TOOL_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_TOOL_NAME: Final = 64
SEPARATOR: Final = "__"
# A result whose text passes this many characters is stored as a file; the model reads the
# first PREVIEW_CHARS and the file's path.
LARGE_RESULT_CHARS: Final = 20_000
PREVIEW_CHARS: Final = 2_000
_UNSAFE: Final = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass(frozen=True)
class RemoteTool:
    """One remote tool as a prompt offers it: ``name`` is what the model calls, ``parameters``
    the JSON Schema its arguments are checked against, ``remote_name`` its name on ``server``."""

    name: str
    description: str
    parameters: dict[str, Any]
    source: Source
    server: str
    remote_name: str


@dataclass(frozen=True)
class RemoteRef:
    source: Source
    server: str
    tool: str | None  # None: every tool of the server


def parse_ref(ref: str) -> RemoteRef | None:
    """The remote reference ``ref`` spells, or None when it is not one (no known prefix).
    A malformed one (``mcp:`` without a server) parses with an empty server."""
    if not ref.startswith(MCP_PREFIX):
        return None
    server, _, tool = ref[len(MCP_PREFIX) :].partition("/")
    return RemoteRef("mcp", server, tool or None)


def is_remote_ref(ref: str) -> bool:
    return parse_ref(ref) is not None


def model_name(server: str, remote_name: str) -> str:
    """The name the model calls ``remote_name`` of ``server`` by (see the module doc)."""
    name = f"{server}{SEPARATOR}{_UNSAFE.sub('_', remote_name)}"
    return name[:MAX_TOOL_NAME]


def server_tool_names(server: str, tools: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Remote name -> model name for a server's listed tools."""
    return {str(tool["name"]): model_name(server, str(tool["name"])) for tool in tools}


# Resolving -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolution:
    """What a reference resolves to: ``tools`` offered (collisions left out), ``problem``
    why the reference cannot be used as written (None: it can)."""

    tools: tuple[RemoteTool, ...]
    problem: str | None = None


def _select(
    ref: RemoteRef, row: McpServer, listed: Sequence[Mapping[str, Any]], *, known: bool
) -> Resolution:
    """``ref``'s tools among ``listed`` (``known``: whether the listing was ever fetched)."""
    chosen = [t for t in listed if ref.tool is None or t["name"] == ref.tool]
    if ref.tool is not None and not chosen and known:
        names = ", ".join(sorted(str(t["name"]) for t in listed)) or "none"
        return Resolution((), f"MCP server {row.name!r} has no tool {ref.tool!r} (its tools: "
                              f"{names}; refresh its list with POST "
                              f"/api/v1/mcp-servers/{row.name}/refresh if it changed)")  # fmt: skip
    tools: list[RemoteTool] = []
    taken: dict[str, str] = {}
    problem: str | None = None
    for item in chosen:
        remote = str(item["name"])
        name = model_name(row.name, remote)
        if name in taken:
            problem = problem or (
                f"tools {taken[name]!r} and {remote!r} of MCP server {row.name!r} both become "
                f"{name!r} for the model; name one of them alone (mcp:{row.name}/<tool>)"
            )
            continue
        taken[name] = remote
        schema = item.get("input_schema")
        tools.append(RemoteTool(
            name=name, description=str(item.get("description") or remote),
            parameters=dict(schema) if isinstance(schema, Mapping) else {"type": "object"},
            source="mcp", server=row.name, remote_name=remote,
        ))  # fmt: skip
    return Resolution(tuple(tools), problem)


def remote_tools(*, tenant: Tenant, ref: str) -> Resolution:
    """The tools ``ref`` offers ``tenant``'s flows now: from the server's cached list,
    fetched again when stale (outside any transaction). An unknown server, or one never
    listed and unreachable, offers none (``problem`` says why)."""
    parsed = parse_ref(ref)
    if parsed is None:
        return Resolution((), f"{ref!r} is not a remote tool reference")
    row = McpServer.objects.for_tenant(tenant).filter(name=parsed.server).first()
    if row is None:
        return Resolution((), f"no MCP server named {parsed.server!r}")
    listing = tools_current(row)
    resolution = _select(parsed, row, listing.tools, known=row.tools_fetched_at is not None)
    if resolution.problem is not None or listing.error is not None:
        logger.warning("tools of %s: %s", ref, resolution.problem or listing.error)
    return resolution


# Checking references in definitions (agents.remote_refs) ---------------------------------------


class McpRefLookup:
    """How definition validation judges ``mcp:`` references of one tenant: from the servers'
    cached lists only (validation runs in a transaction: nothing is fetched)."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        self._rows: dict[str, McpServer] | None = None

    def _servers(self) -> dict[str, McpServer]:
        if self._rows is None:
            self._rows = {row.name: row for row in McpServer.objects.for_tenant(self.tenant)}
        return self._rows

    def resolve(self, ref: str) -> RemoteRefCheck | None:
        parsed = parse_ref(ref)
        if parsed is None:
            return None
        if not parsed.server:
            return RemoteRefCheck(problem=f"{ref!r} names no server: write mcp:<server> or "
                                          "mcp:<server>/<tool>")  # fmt: skip
        row = self._servers().get(parsed.server)
        if row is None:
            known = ", ".join(sorted(self._servers())) or "none"
            return RemoteRefCheck(problem=f"no MCP server named {parsed.server!r} (this "
                                          f"tenant's: {known})")  # fmt: skip
        known_list = row.tools_fetched_at is not None
        resolution = _select(parsed, row, row.tools, known=known_list)
        names = tuple(tool.name for tool in resolution.tools)
        if parsed.tool is not None and not known_list:
            names = (model_name(row.name, parsed.tool),)
        return RemoteRefCheck(names=names, problem=resolution.problem)


def mcp_ref_lookup(tenant: Tenant) -> McpRefLookup:
    return McpRefLookup(tenant)


# Calling ---------------------------------------------------------------------------------------


def remote_call(*, tenant: Tenant, tool: RemoteTool, arguments: Mapping[str, Any]) -> ToolResult:
    """Call ``tool`` with checked ``arguments`` and map what the server answered onto a
    tool result (see the module doc; never raises). No transaction may be open."""
    caller = CALLERS.get(tool.source)
    if caller is None:
        return ToolResult.failure(f"remote tools of kind {tool.source!r} cannot be called")
    return caller(tenant, tool, arguments)


def _mcp_call(tenant: Tenant, tool: RemoteTool, arguments: Mapping[str, Any]) -> ToolResult:
    row = McpServer.objects.for_tenant(tenant).filter(name=tool.server).first()
    if row is None:
        return ToolResult.failure(
            f"MCP server {tool.server!r} no longer exists", code="mcp_server_gone"
        )
    try:
        answer = client.tool_call(
            server_endpoint(row), tool.remote_name, arguments, timeout=float(row.call_timeout_s)
        )
    except McpUnavailable as error:
        token_forget(row)
        message = server_failure(row, error)
        contact_recorded(row, error=message)
        return ToolResult.failure(message, code=error.code)
    contact_recorded(row, error=None)
    return mcp_result(tool, answer)


def mcp_result(tool: RemoteTool, answer: CallToolResult) -> ToolResult:
    """An MCP ``tools/call`` result as a tool result: text parts (and embedded text
    resources) joined as the text, the structured content as JSON text when there is no
    text, images, audio and binary resources as attachments, ``isError`` as a failure; a
    text past ``LARGE_RESULT_CHARS`` is stored as a file and previewed."""
    texts: list[str] = []
    attachments: list[dict[str, Any]] = []
    for part in answer.content:
        if isinstance(part, TextContent):
            texts.append(part.text)
        elif isinstance(part, ImageContent | AudioContent):
            attachments.append(_attachment(tool, part.mime_type, part.data, len(attachments)))
        elif isinstance(part, EmbeddedResource):
            resource = part.resource
            if isinstance(resource, TextResourceContents):
                texts.append(resource.text)
            elif isinstance(resource, BlobResourceContents):
                mime = resource.mime_type or "application/octet-stream"
                attachments.append(_attachment(tool, mime, resource.blob, len(attachments)))
        elif isinstance(part, ResourceLink):
            texts.append(f"[resource] {part.uri}")
    structured = answer.structured_content
    text = "\n".join(texts)
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False, default=str)
    if answer.is_error:
        return ToolResult(
            "error",
            error=f"MCP server {tool.server!r}: {text or 'the tool failed without a message'}",
            attachments=tuple(attachments),
            error_code="mcp_tool_error",
            error_data=structured,
        )
    if len(text) > LARGE_RESULT_CHARS:
        suffix = ".json" if not texts and structured is not None else ".txt"
        mime = "application/json" if suffix == ".json" else "text/plain"
        attachments.insert(0, {
            "name": f"{tool.name}-result{suffix}", "mimeType": mime,
            "data": base64.b64encode(text.encode()).decode(),
        })  # fmt: skip
        text = (
            f"{text[:PREVIEW_CHARS]}\n[... the result is {len(text)} characters; the first "
            f"{PREVIEW_CHARS} are above, the whole of it is stored as the attachment "
            f"{tool.name}-result{suffix}]"
        )
    return ToolResult.success(text or None, attachments=attachments)


def _attachment(tool: RemoteTool, mime: str, data: str, index: int) -> dict[str, Any]:
    extension = mimetypes.guess_extension(mime) or ".bin"
    return {"name": f"{tool.name}-{index + 1}{extension}", "mimeType": mime, "data": data}


Caller = Callable[[Tenant, RemoteTool, Mapping[str, Any]], ToolResult]
CALLERS: Final[dict[str, Caller]] = {"mcp": _mcp_call}
