"""The engine's door to remote tools: what a prompt's ``tools[]`` reference to a remote source
resolves to, and calling one.

A reference names a source by its prefix:

- MCP: ``mcp:<server>`` (every tool the server lists) or ``mcp:<server>/<tool>`` (one). The
  model sees a remote tool as ``<server>__<tool>``, the remote name's characters outside
  ``[A-Za-z0-9_-]`` replaced by ``_`` and cut to 64 characters (a provider's limit): two tools
  of one server that become the same name are refused (validation names them, and a flow
  offers only the first).
- A2A: ``a2a:<agent>``, one tool ``<agent>__send_message`` (:mod:`connectors.a2a`).

Each source has a resolver (what a reference offers a flow), a check (what definition
validation says of it, from cached data only) and a caller; the engine does not change.

:func:`remote_call` never raises: a transport error, a timeout, an egress refusal, a deleted
server or agent, or the tool's own error is a failure result naming the server or agent. It
opens no transaction and must be called with none open (the runner calls it after
``flow.idle()``).
"""

from __future__ import annotations

import json
import logging
import mimetypes
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from agents.registry import ToolResult
from agents.remote_refs import RemoteRefCheck
from connectors import a2a
from connectors.models import A2aAgent, McpServer
from connectors.remote import contact_failed, contact_recorded, endpoint_of
from connectors.results import large_result
from connectors.servers import server_name, tools_current
from connectors.transport import RemoteUnavailable
from tenancy.models import Tenant

if TYPE_CHECKING:
    from mcp_types import CallToolResult

logger = logging.getLogger(__name__)

Source = Literal["mcp", "a2a"]
MCP_PREFIX: Final = "mcp:"
A2A_PREFIX: Final = "a2a:"
PREFIXES: Final[dict[str, Source]] = {MCP_PREFIX: "mcp", A2A_PREFIX: "a2a"}
TOOL_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_TOOL_NAME: Final = 64
SEPARATOR: Final = "__"
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
    for prefix, source in PREFIXES.items():
        if ref.startswith(prefix):
            server, _, tool = ref[len(prefix) :].partition("/")
            return RemoteRef(source, server, tool or None)
    return None


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
    if parsed.source == "a2a":
        return _a2a_tools(tenant, parsed)
    row = McpServer.objects.for_tenant(tenant).filter(name=parsed.server).first()
    if row is None:
        return Resolution((), f"no MCP server named {parsed.server!r}")
    listing = tools_current(row)
    resolution = _select(parsed, row, listing.tools, known=row.tools_fetched_at is not None)
    if resolution.problem is not None or listing.error is not None:
        logger.warning("tools of %s: %s", ref, resolution.problem or listing.error)
    return resolution


def _a2a_tools(tenant: Tenant, ref: RemoteRef) -> Resolution:
    """An A2A agent's one tool, described from its cached card (a call fetches a stale card:
    nothing is fetched here)."""
    row = A2aAgent.objects.for_tenant(tenant).filter(name=ref.server).first()
    if row is None:
        return Resolution((), f"no A2A agent named {ref.server!r}")
    tool = RemoteTool(
        name=a2a.tool_name(row.name), description=a2a.tool_description(row),
        parameters=a2a.PARAMETERS, source="a2a", server=row.name, remote_name="send_message",
    )  # fmt: skip
    return Resolution((tool,))


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


class A2aRefLookup:
    """How definition validation judges ``a2a:`` references of one tenant (the agent must be
    registered; its one tool's name needs no card)."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        self._names: set[str] | None = None

    def resolve(self, ref: str) -> RemoteRefCheck | None:
        parsed = parse_ref(ref)
        if parsed is None or parsed.source != "a2a":
            return None
        if not parsed.server or parsed.tool is not None:
            return RemoteRefCheck(problem=f"{ref!r}: write a2a:<agent>, the name of one of "
                                          "this tenant's A2A agents")  # fmt: skip
        if self._names is None:
            self._names = set(
                A2aAgent.objects.for_tenant(self.tenant).values_list("name", flat=True)
            )
        if parsed.server not in self._names:
            known = ", ".join(sorted(self._names)) or "none"
            return RemoteRefCheck(problem=f"no A2A agent named {parsed.server!r} (this "
                                          f"tenant's: {known})")  # fmt: skip
        return RemoteRefCheck(names=(a2a.tool_name(parsed.server),))


def a2a_ref_lookup(tenant: Tenant) -> A2aRefLookup:
    return A2aRefLookup(tenant)


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
    from connectors import client  # the MCP SDK loads where a server is called (process start)

    try:
        answer = client.tool_call(
            endpoint_of(row), tool.remote_name, arguments, timeout=float(row.call_timeout_s)
        )
    except RemoteUnavailable as error:
        message = contact_failed(row, error, what=server_name(row))
        return ToolResult.failure(message, code=error.code)
    contact_recorded(row, error=None)
    return mcp_result(tool, answer)


def _a2a_call(tenant: Tenant, tool: RemoteTool, arguments: Mapping[str, Any]) -> ToolResult:
    return a2a.agent_call(tenant, tool.server, arguments)


def mcp_result(tool: RemoteTool, answer: CallToolResult) -> ToolResult:
    """An MCP ``tools/call`` result as a tool result: text parts (and embedded text
    resources) joined as the text, the structured content as JSON text when there is no
    text, images, audio and binary resources as attachments, ``isError`` as a failure; a
    text past ``LARGE_RESULT_CHARS`` is stored as a file and previewed."""
    from mcp_types import (
        AudioContent,
        BlobResourceContents,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

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
    return large_result(
        tool.name, text, attachments, json_text=not texts and structured is not None
    )


def _attachment(tool: RemoteTool, mime: str, data: str, index: int) -> dict[str, Any]:
    extension = mimetypes.guess_extension(mime) or ".bin"
    return {"name": f"{tool.name}-{index + 1}{extension}", "mimeType": mime, "data": data}


Caller = Callable[[Tenant, RemoteTool, Mapping[str, Any]], ToolResult]
CALLERS: Final[dict[str, Caller]] = {"mcp": _mcp_call, "a2a": _a2a_call}
