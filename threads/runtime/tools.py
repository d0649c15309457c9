"""Running a step's tool calls: one by one, in the order the model returned them.

Every outcome — success, a tool's error, invalid arguments, an unknown tool, an exception —
is persisted as a tool message (spec runtime §5.2, :mod:`threads.runtime.tool_results`);
nothing a tool does crashes the flow.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agents.documents import SessionBinding
from agents.permission_rules import TenantRule
from agents.permissions import Rule, Verdict, decide, rule_from
from agents.providers.base import ToolCall
from agents.registry import HookName, ToolResult, tool_result_from
from agents.schemas import ArgumentsInvalid, validate_args
from common.errors import DomainError
from common.ids import new_id
from connectors.tools import RemoteTool, remote_call
from threads.events import INLINE_LIMIT
from threads.models import Message
from threads.runtime.client_tools import RESULT_SCHEMA, client_tool_result
from threads.runtime.code_mode import CodePaused, code_mode_run
from threads.runtime.definitions import ResolvedTool
from threads.runtime.hooks import Hooks
from threads.runtime.telemetry_door import telemetry
from threads.runtime.tool_calls import (
    ActionNeeded,
    FlowAborted,
    InFlight,
    ToolOutcome,
    call_function_tool,
    call_json,
)
from threads.runtime.tool_results import session_mapping, tool_message_store
from threads.services.code import code_tool_run
from threads.services.code_usage import sandbox_payer
from threads.services.control import STOPPED_BY_USER

if TYPE_CHECKING:
    from threads.runtime.engine import Flow


def call_rules(
    resolved: ResolvedTool | None, *, name: str, agent: str, tenant_rules: Iterable[TenantRule]
) -> list[Rule]:
    """The rules weighed for a call of tool ``name`` (``resolved``: what it resolves to for
    the acting prompt, None when the prompt does not offer it) on a thread of ``agent``: the
    registry tool's default, the prompt entry's ``approval``, then the tenant's rules that
    cover this agent and tool."""
    rules: list[Rule] = []
    if resolved is not None and resolved.entry is not None and resolved.entry.approval:
        rules.append(resolved.entry.approval)
    if resolved is not None and resolved.config is not None and resolved.config.approval:
        rules.append(rule_from(resolved.config.approval, source="prompt"))
    rules += [own.rule for own in tenant_rules if own.covers(agent=agent, tool=name)]
    return rules


def call_verdict(
    resolved: ResolvedTool | None,
    *,
    name: str,
    agent: str,
    tenant_rules: Iterable[TenantRule],
    arguments: object,
) -> Verdict:
    """What the rules of :func:`call_rules` decide for a call with ``arguments`` (anything
    but an object counts as no arguments). The one decision the engine and the dry run
    (``POST /api/v1/permissions/evaluate``) both make."""
    rules = call_rules(resolved, name=name, agent=agent, tenant_rules=tenant_rules)
    return decide(rules, arguments if isinstance(arguments, Mapping) else {})


class ToolRunner:
    """Runs calls for one prompt and side, storing results under ``parent`` (None: top level)."""

    def __init__(
        self,
        flow: Flow,
        *,
        prompt_name: str,
        side: str,
        tools: Mapping[str, ResolvedTool],
        hooks: Hooks,
        parent: Message | None,
        session_bindings: Mapping[str, SessionBinding] | None = None,
        status_tool: str | None = None,
        pausable: bool = False,
    ) -> None:
        self.flow = flow
        self.prompt_name = prompt_name
        self.side = side
        self.tools = tools
        self.hooks = hooks
        self.parent = parent
        self.bindings = dict(session_bindings or {})
        self.status_tool = status_tool  # the side's session_status binding
        # Whether a call may pause the turn for a person (a model step's own calls); other
        # calls (a subprompt's, a queued tool's) that need one are refused.
        self.pausable = pausable

    def run(self, calls: Sequence[ToolCall], *, issuer: Message) -> list[ToolOutcome]:
        """Run ``calls`` (issued by ``issuer``) in order. On abort, the calls not yet run get
        ``Execution stopped by user`` error results, then FlowAborted propagates."""
        outcomes: list[ToolOutcome] = []
        for index, call in enumerate(calls):
            if self.flow.aborted:
                for unanswered in calls[index:]:
                    tool_message_store(
                        self, unanswered, ToolResult.failure(STOPPED_BY_USER), None, verbatim=True
                    )
                raise FlowAborted
            outcomes.append(self.run_one(call, issuer=issuer))
        return outcomes

    def run_one(
        self,
        call: ToolCall,
        *,
        issuer: Message,
        forced: ResolvedTool | None = None,
        execute: Callable[[], ToolResult] | None = None,
        granted: bool = False,
        decided: ToolResult | None = None,
    ) -> ToolOutcome:
        """Run one call: its permission (not for a call the runtime makes itself, with
        ``execute``, nor one a person ``granted``), events, the tool (or ``execute``), the
        after-call hooks, the stored result and its log row. A denied call does not start:
        its result is the denial (``decided``: a person's). Raises ActionNeeded when a rule
        asks a person first and this call may wait for one."""
        resolved = forced or self.tools.get(call.name)
        log_id = new_id()
        pausable = self.pausable and forced is None
        denied = decided
        if denied is None and execute is None and not granted:
            denied = self._permission(call, resolved, issuer, pausable=pausable)
        # From its start to its stored result, the call may wait for a person's input
        # (state.request_input in the tool or in the hooks around it): it then runs again.
        with (
            self.flow.tool_call(InFlight(call, issuer, pausable=pausable)),
            telemetry().tool_call(self.flow, call) as record,
        ):
            if denied is None:
                self.hooks.notify(HookName.TOOL_CALL_STARTED, call_json(call), None)
                self.flow.publish(
                    "tool.started", {"tool_call_id": call.id, "name": call.name,
                                     **self._arguments_or_ref(call, log_id)},
                )  # fmt: skip
                self._progress_argument(call, resolved)
            started = time.perf_counter()
            if denied is not None:
                result = denied
            elif execute is not None:
                result = execute()
            else:
                result = self._execute(call, resolved, issuer)
            hook = (
                HookName.AFTER_TOOL_CALL_SUCCESS
                if result.status == "success"
                else HookName.AFTER_TOOL_CALL_FAILURE
            )
            after = self.hooks.transform(hook, result, call_json(call), keep_none=True)
            stored: Message | None = None
            if after is not None:
                result = tool_result_from(after)
                result = tool_result_from(
                    self.hooks.transform(HookName.BEFORE_STORE_TOOL_RESULT, result, call_json(call))
                )
            record.ended(result)
        duration_ms = round((time.perf_counter() - started) * 1000, 3)
        with self._writes():
            if after is not None:
                result, attachments = session_mapping(self, call, result)
                stored = tool_message_store(self, call, result, attachments)
                if call.name == self.status_tool and result.status == "success":
                    self.flow.status_report(stored.content or "")
            self.flow.log_tool(
                call, result, stored, duration_ms, kind=resolved.kind if resolved else None,
                log_id=log_id,
            )  # fmt: skip
        self.hooks.notify(HookName.TOOL_CALL_DONE, call_json(call), result)
        return ToolOutcome(call, result, stored)

    def _writes(self) -> contextlib.AbstractContextManager[None]:
        """The result's message and its log row commit as one, unless message hooks (user
        code) would then run while the transaction holds the thread's row."""
        if self.hooks.has(HookName.BEFORE_CREATE_MESSAGE) or self.hooks.has(
            HookName.AFTER_CREATE_MESSAGE
        ):
            return contextlib.nullcontext()
        return self.flow.outbox.batch()

    def _permission(
        self, call: ToolCall, resolved: ResolvedTool | None, issuer: Message, *, pausable: bool
    ) -> ToolResult | None:
        """Weigh the call's permission rules (:meth:`weigh`); the result a denied call gets,
        None when it may run. An ``ask`` raises ActionNeeded, or is refused where no person
        can be waited for."""
        verdict = self.weigh(call, resolved)
        if verdict.decision == "allow" or resolved is None:  # an unknown tool fails anyway
            return None
        if verdict.decision == "deny":
            return self.denial(call, verdict)
        if pausable:
            raise ActionNeeded(
                kind="approval", call=call, issuer=issuer, rule=verdict.rule,
                schema=resolved.parameters,
            )  # fmt: skip
        return self.unavailable(call, verdict)

    def weigh(self, call: ToolCall, resolved: ResolvedTool | None) -> Verdict:
        """The verdict of the call's rules (its registry default, its prompt entry's, the
        tenant's for this agent and tool), recorded as ``permission.evaluated``."""
        verdict = call_verdict(
            resolved, name=call.name, agent=self.flow.agent.name,
            tenant_rules=self.flow.defs.permission_rules, arguments=call.arguments,
        )  # fmt: skip
        self.flow.publish(
            "permission.evaluated",
            {"tool_call_id": call.id, "name": call.name, "decision": verdict.decision,
             "rule": verdict.rule.as_json() if verdict.rule is not None else None},
        )  # fmt: skip
        return verdict

    @staticmethod
    def denial(call: ToolCall, verdict: Verdict) -> ToolResult:
        """The result of a call a rule denies."""
        rule = verdict.rule
        return ToolResult.failure(
            f"Permission denied: a {rule.source if rule else ''} rule denies calls of "
            f"{call.name!r}" + (" with these arguments" if rule and rule.when is not None else ""),
            code="permission_denied",
        )

    def unavailable(self, call: ToolCall, verdict: Verdict) -> ToolResult:
        """The result of a call a rule asks a person about, where none can be waited for."""
        where = "a subprompt's tool call" if self.parent is not None else "a queued call"
        source = verdict.rule.source if verdict.rule is not None else ""
        return ToolResult.failure(
            f"Approval required: a {source} rule asks a person before calls of "
            f"{call.name!r}, and {where} cannot wait for one",
            code="approval_unavailable",
        )

    def call_function(self, resolved: ResolvedTool, arguments: dict[str, Any]) -> ToolResult:
        """Run registry tool ``resolved`` (or a remote one) with checked ``arguments``; what it
        raises becomes a failure result (a pause for a person, or an abort, propagates)."""
        if resolved.remote is not None:
            return self.call_remote(resolved.remote, arguments)
        assert resolved.entry is not None
        state = self.flow.tool_state(resolved.config, self.prompt_name)
        self.flow.idle()
        try:
            return call_function_tool(resolved.entry, state, arguments)
        except FlowAborted:
            raise
        except DomainError as error:
            return ToolResult.failure(error.message, code=error.code)
        except Exception as error:  # a tool's bug is reported, never raised
            return ToolResult.failure(f"{type(error).__name__}: {error}")

    def call_remote(self, remote: RemoteTool, arguments: dict[str, Any]) -> ToolResult:
        """Call a remote source's tool (connectors.tools): the flow holds no connection nor
        transaction across it, and every failure is a result naming the server."""
        self.flow.idle()
        return remote_call(tenant=self.flow.defs.tenant, tool=remote, arguments=arguments)

    def _arguments_or_ref(self, call: ToolCall, log_id: uuid.UUID) -> dict[str, Any]:
        """``tool.started`` carries the arguments, or above ``INLINE_LIMIT`` bytes of JSON a
        reference to the call's log row, which holds them once the call ends."""
        if len(json.dumps(call.arguments, default=str)) <= INLINE_LIMIT:
            return {"arguments": call.arguments}
        return {"arguments_ref": f"/api/v1/threads/{self.flow.thread.pk}/logs/{log_id}"}

    # Executing -----------------------------------------------------------------------------

    def _execute(
        self, call: ToolCall, resolved: ResolvedTool | None, issuer: Message
    ) -> ToolResult:
        if resolved is None:
            guidance = self.flow.direct_call_guidance(call.name, self.tools)
            if guidance is not None:
                return ToolResult.failure(guidance)
            offered = ", ".join(sorted(self.tools)) or "none"
            return ToolResult.failure(
                f"Tool {call.name!r} is not available to prompt {self.prompt_name!r} "
                f"(its tools: {offered})"
            )
        try:
            arguments = validate_args(resolved.parameters, call.arguments)
        except ArgumentsInvalid as error:
            return ToolResult.failure(error.message, code=error.code)
        try:
            return self._dispatch(resolved, call, arguments, issuer)
        except FlowAborted:
            raise
        except DomainError as error:
            return ToolResult.failure(error.message, code=error.code)
        except Exception as error:  # a tool's bug is reported to the model, never raised
            return ToolResult.failure(f"{type(error).__name__}: {error}")

    def _progress_argument(self, call: ToolCall, resolved: ResolvedTool | None) -> None:
        """A registry tool's ``progress_argument`` (what the model says the call is doing):
        its value is the call's first ``tool.progress``."""
        entry = resolved.entry if resolved is not None else None
        name = entry.progress_argument if entry is not None else None
        value = call.arguments.get(name) if name else None
        if isinstance(value, str) and value.strip():
            self.flow.publish("tool.progress", {"tool_call_id": call.id, "progress": value})

    def _dispatch(
        self, resolved: ResolvedTool, call: ToolCall, arguments: dict[str, Any], issuer: Message
    ) -> ToolResult:
        if resolved.kind == "function":
            assert resolved.entry is not None
            state = self.flow.tool_state(resolved.config, self.prompt_name)
            self.flow.idle()  # a tool may wait on anything; what it reads takes a connection
            return call_function_tool(resolved.entry, state, arguments)
        if resolved.remote is not None:
            return self.call_remote(resolved.remote, arguments)
        if resolved.kind == "code_mode":
            return self._program(call, arguments, issuer)
        if resolved.kind == "client":  # the client runs it: its answer is the result
            return client_tool_result(self.flow.request_input(RESULT_SCHEMA, call.name))
        if resolved.kind == "prompt":
            return self.flow.run_subprompt(resolved, arguments, issuer=issuer, side=self.side)
        if resolved.kind == "handoff":
            return self.flow.request_handoff(resolved, arguments)
        if resolved.kind in ("subagent", "lifecycle"):
            return self.flow.run_subagent(resolved, arguments, side=self.side)
        config = resolved.config
        self.flow.idle()
        with telemetry().sandbox_call(self.flow, resolved.name):
            return code_tool_run(
                self.flow.defs.code_tool(resolved.name), arguments,
                tenant_id=self.flow.thread.tenant_id, abort=self.flow.execution.abort_signal,
                entry_env=config.env if config is not None else None,
                entry_options=config.options if config is not None else None,
                payer=sandbox_payer(thread=self.flow.thread, turn=self.flow.turn),
            )  # fmt: skip

    def _program(self, call: ToolCall, arguments: dict[str, Any], issuer: Message) -> ToolResult:
        """A ``code`` call (:mod:`threads.runtime.code_mode`); a call of its program that a
        rule asks about pauses the turn on an action carrying the program's journal."""
        pausable = self.flow.calling is not None and self.flow.calling.pausable
        try:
            with telemetry().sandbox_call(self.flow, call.name):
                return code_mode_run(
                    self, call, arguments, pausable=pausable,
                    replay=self.flow.code_replays.pop(call.id, None),
                )  # fmt: skip
        except CodePaused as paused:
            raise ActionNeeded(
                kind="approval",
                call=call,
                issuer=issuer,
                rule=paused.rule,
                schema=paused.schema,
                name=paused.call.name,
                arguments=paused.call.arguments,
                resume={"code": {"journal": paused.journal}},
            ) from None
