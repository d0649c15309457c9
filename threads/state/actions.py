"""``ThreadState``'s actions on the flow and beyond: custom events, queued and invoked
tools, scheduled effects, a person's input, code in the sandbox, terminate and
``stop_session``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from django.core.exceptions import ValidationError

from common.errors import DomainError, NotAvailable, NotFound
from threads.events import publish
from threads.models import EffectStatus
from threads.runtime.invoke import tool_invoke
from threads.services.code import code_run
from threads.services.code_usage import ChargedExecution, sandbox_payer
from threads.services.control import thread_terminate
from threads.services.effects import effect_cancel, effect_schedule, effects_of, pending_json
from threads.services.inbox import tool_queue
from threads.services.subagents import StopSession
from threads.state.base import StateBase

if TYPE_CHECKING:
    from threads.state.thread_state import ThreadState

MAX_PROGRESS_BYTES = 4 * 1024


class ActionsMixin(StateBase):
    # Events ------------------------------------------------------------------------

    def emit(self, event: str, data: Any = None) -> None:
        """A custom event (``state.emit``): broadcast to the thread's listeners."""
        publish(self._thread, "custom", {"name": event, "data": data}, outbox=self.outbox)

    def report_progress(self, progress: Any) -> None:
        """The running tool call's progress (a JSON value of at most
        :data:`MAX_PROGRESS_BYTES`): a ``tool.progress`` event of that call. Only in a
        tool the flow is calling."""
        flow = self._flow
        calling = flow.calling if flow is not None else None
        if flow is None or calling is None:
            raise DomainError("report_progress needs a running tool call of a turn")
        try:
            size = len(json.dumps(progress, allow_nan=False))
        except (TypeError, ValueError) as error:
            raise DomainError(f"progress must be JSON: {error}") from error
        if size > MAX_PROGRESS_BYTES:
            raise DomainError(
                f"progress is {size} bytes of JSON; the limit is {MAX_PROGRESS_BYTES}"
            )
        flow.publish("tool.progress", {"tool_call_id": calling.call.id, "progress": progress})

    # A person's input ----------------------------------------------------------------

    def request_input(self, schema: Mapping[str, Any], prompt: str = "") -> dict[str, Any]:
        """Ask a person for structured input (``schema``: a JSON Schema of an object) and
        return their answer, checked against it. Only in a tool the model's step calls, or a
        hook around that call: the turn pauses (``waiting_input``) until the answer comes
        through respond_action, then the call runs again from its start and this returns the
        answer. Raises
        InputDeclined when the person declined (the tool fails with their reason unless it
        catches it)."""
        if self._flow is None:
            raise DomainError(
                "request_input needs a tool call of a running turn (a person answers it "
                "while the turn waits)"
            )
        return self._flow.request_input(schema, prompt)

    # Tools and effects ---------------------------------------------------------------

    def queue_tool(self, name: str, args: Mapping[str, Any] | None = None) -> None:
        """During execution: run after the current step's tool calls. At rest: starts a
        standalone execution that runs it, then lets side A respond."""
        if self.execution is not None:
            self.execution.tool_queue.append((name, dict(args or {})))
            return

        tool_queue(thread=self._thread, name=name, args=args)

    def invoke_tool(self, name: str, args: Mapping[str, Any] | None = None) -> Any:
        """Run a tool now and return its ToolResult. At rest a silent system message anchors
        the call in the history (``metadata.status_kind = "runtime_tool_invocation"``)."""
        return tool_invoke(state=cast("ThreadState", self), name=name, args=dict(args or {}))

    def schedule_effect(self, name: str, args: Any = None, delay_ms: int = 0) -> str:
        """Run registry effect ``name`` with ``args`` in ``delay_ms`` milliseconds (spec
        Threads §5); returns its id. Unknown names and arguments that do not match the
        effect's schema are refused now (ValidationFailed)."""
        row = effect_schedule(
            thread=self._thread, name=name, args=args, delay_ms=delay_ms, outbox=self.outbox
        )
        return str(row.pk)

    def get_scheduled_effects(self, name: str | None = None) -> list[dict[str, Any]]:
        """The thread's pending effects, soonest first (``name``: only those):
        ``{id, name, args, scheduledAt, createdAt}`` (µs)."""
        rows = effects_of(thread=self._thread, name=name, status=EffectStatus.PENDING)
        return pending_json(list(rows))

    def remove_scheduled_effect(self, effect_id: str) -> bool:
        """Cancel a pending effect (``agent_canceled``); False when there is none to cancel
        (unknown, already ran, runs now, or cancelled)."""
        try:
            return (
                effect_cancel(thread=self._thread, effect_id=effect_id, by_agent=True) is not None
            )
        except (NotFound, ValidationError, ValueError):
            return False

    def run_code(self, source: str, options: Mapping[str, Any] | None = None) -> ChargedExecution:
        """Run ``source`` in a fresh QuickJS sandbox (spec runtime §13, DIGEST §17); returns the
        handle at once: ``result()`` (or ``await``), ``terminate(reason)``, ``running``,
        ``reports``. Inside a flow, stopping or terminating the flow terminates it. Collecting
        its result records its ``runCode`` ledger row for the thread (and the flow's turn)."""
        abort = self.execution.abort_signal if self.execution is not None else None
        turn = self._flow.turn if self._flow is not None else None
        return ChargedExecution(
            code_run(source, options, abort=abort),
            payer=sandbox_payer(thread=self._thread, turn=turn), name="runCode",
        )  # fmt: skip

    def terminate(self) -> None:
        """Soft-terminate (spec runtime §10): later sends are refused (409), in-flight work
        is aborted. Idempotent."""
        thread_terminate(thread=self._thread)
        if self.execution is not None:
            self.execution.abort_signal.set()

    def stop_session(
        self,
        *,
        result: str = "Session stopped.",
        notify_parent: bool = True,
        status: str | None = None,
    ) -> None:
        """End the current session after this step (``state_stop_session``). For a subagent,
        ``result`` is its session's outcome; ``notify_parent`` False keeps it from being
        queued to the parent; ``status`` sets its registry status. Needs an active
        execution."""
        if self.execution is None or self._flow is None:
            raise NotAvailable("stop_session needs an active execution (a tool or hook of a flow)")
        self._flow.stop_session(StopSession(str(result), bool(notify_parent), status))
