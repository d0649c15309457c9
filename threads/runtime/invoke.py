"""``state.invoke_tool``: run a tool now and hand its result to the caller."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.registry import ToolResult
from agents.schemas import ArgumentsInvalid
from common.errors import DomainError
from threads.runtime.definitions import FlowDefinitions
from threads.runtime.tool_calls import call_function_tool
from threads.services.messages import message_inject

if TYPE_CHECKING:
    from threads.state import ThreadState


def tool_invoke(*, state: ThreadState, name: str, args: dict[str, Any]) -> ToolResult:
    """Run the registry tool ``name`` with ``args`` (runtime-forced: not limited to a
    prompt's tools). Errors come back as error results, never raised. At rest (no running
    flow) a silent system message records the invocation
    (``metadata.status_kind = "runtime_tool_invocation"``)."""
    thread = state.thread
    defs = (
        state._flow.defs
        if state._flow is not None
        else FlowDefinitions(tenant=thread.tenant, model_env=lambda _: None)
    )
    resolved = defs.resolve_any(name)
    if resolved is None or resolved.entry is None:
        result = ToolResult.failure(
            f"no function tool named {name!r}"
            if resolved is None
            else f"{name!r} is a {resolved.kind} tool; invoke_tool runs function tools"
        )
    else:
        try:
            result = call_function_tool(resolved.entry, state, args)
        except ArgumentsInvalid as error:
            result = ToolResult.failure(error.message, code=error.code)
        except DomainError as error:
            result = ToolResult.failure(error.message, code=error.code)
        except Exception as error:  # a tool's bug is the caller's result, not a crash
            result = ToolResult.failure(f"{type(error).__name__}: {error}")
    if state.execution is None:
        message_inject(
            thread=thread, role="system", content=f"Invoked tool {name}", silent=True,
            metadata={"status_kind": "runtime_tool_invocation", "tool": name,
                      "arguments": args, "status": result.status},
        )  # fmt: skip
    return result
